"""Changes between two cluster states: applied to the first, they give the second, and they carry only what
differs."""

from __future__ import annotations

import copy
import json

from hypothesis import given, settings
from hypothesis import strategies as st

from portal.dashboard.cluster_delta import apply_changes, changes

_status = st.sampled_from(["free", "TE", "BE", "preempting", "lost"])
_gpu = st.fixed_dictionaries({"index": st.integers(0, 7), "status": _status,
                              "job_id": st.one_of(st.none(), st.integers(1, 6))})
_node = st.fixed_dictionaries({"state": st.sampled_from(["UP", "DOWN", "NODE_LOST"]), "free": st.integers(0, 8),
                               "gpus": st.lists(_gpu, max_size=3)})
_nodes = st.dictionaries(st.sampled_from([f"n{i}" for i in range(8)]), _node, max_size=6).map(
    lambda by_name: [{"name": name, **node} for name, node in by_name.items()])
_job = st.fixed_dictionaries({"name": st.text(max_size=4), "state": st.sampled_from(["RUNNING", "PREEMPTING"]),
                              "mine": st.booleans()})
_state = st.fixed_dictionaries(
    {"nodes": _nodes, "jobs": st.dictionaries(st.sampled_from([str(i) for i in range(1, 7)]), _job, max_size=6),
     "generated_at": st.sampled_from(["2026-12-07T10:00:00Z", "2026-12-07T10:00:01Z"]),
     "totals": st.fixed_dictionaries({"free": st.integers(0, 3)})},
    optional={"queue": st.fixed_dictionaries({"count": st.integers(0, 2)}), "extra": st.integers(0, 1)})


@settings(max_examples=300, deadline=None)
@given(_state, _state)
def test_changes_applied_to_the_sent_state_give_the_new_one(sent, new):
    kept = copy.deepcopy(sent)
    delta = changes(sent, new)
    json.loads(json.dumps(delta))  # it travels as JSON
    assert apply_changes(sent, delta) == new
    assert sent == kept  # neither the sent state nor its nodes and jobs are changed


@settings(max_examples=100, deadline=None)
@given(_state)
def test_a_state_unchanged_gives_no_changes(state):
    assert changes(state, copy.deepcopy(state)) == {"set": {}, "nodes": [], "jobs": {}, "jobs_gone": []}


def _cluster(nodes: int) -> dict:
    return {
        "generated_at": "2026-12-07T10:00:00Z", "totals": {"free": 0},
        "nodes": [{"name": f"node{i:04d}", "state": "UP", "free": 0,
                   "gpus": [{"index": g, "status": "BE", "job_id": i} for g in range(8)]} for i in range(nodes)],
        "jobs": {str(i): {"id": i, "name": f"job-{i}", "state": "RUNNING", "started_at": "2026-12-07T09:00:00Z"}
                 for i in range(nodes)},
    }


def test_a_job_ending_on_one_node_of_a_thousand_sends_that_node_and_that_job_only():
    sent = _cluster(1000)
    new = copy.deepcopy(sent)
    new["generated_at"] = "2026-12-07T10:00:05Z"
    new["totals"] = {"free": 8}
    new["nodes"][500] = {**new["nodes"][500], "free": 8,
                         "gpus": [{"index": g, "status": "free", "job_id": None} for g in range(8)]}
    del new["jobs"]["500"]
    delta = changes(sent, new)
    assert [node["name"] for node in delta["nodes"]] == ["node0500"] and "node_order" not in delta
    assert delta["jobs"] == {} and delta["jobs_gone"] == ["500"]
    assert delta["set"] == {"generated_at": "2026-12-07T10:00:05Z", "totals": {"free": 8}}
    assert len(json.dumps(delta)) * 100 < len(json.dumps(new))  # a change is not the whole state again


def test_a_node_added_or_removed_sends_the_order_of_the_names():
    sent = _cluster(3)
    added = copy.deepcopy(sent)
    added["nodes"].insert(1, {"name": "node0000a", "state": "UP", "free": 8, "gpus": []})
    delta = changes(sent, added)
    assert delta["node_order"] == ["node0000", "node0000a", "node0001", "node0002"]
    assert [node["name"] for node in delta["nodes"]] == ["node0000a"]
    removed = changes(added, sent)
    assert removed["nodes"] == [] and removed["node_order"] == ["node0000", "node0001", "node0002"]
    assert apply_changes(added, removed) == sent


_brief = st.fixed_dictionaries({"id": st.integers(1, 9), "name": st.sampled_from(["a", "b"]), "owner_id": st.integers(1, 3),
                                "url": st.just("/jobs/1/"), "state": st.sampled_from(["RUNNING", "PREEMPTING"])})
_shared = st.fixed_dictionaries({
    "nodes": _nodes,
    "jobs": st.dictionaries(st.sampled_from([str(i) for i in range(1, 7)]), _brief, max_size=6),
    "generated_at": st.sampled_from(["2026-12-07T10:00:00Z", "2026-12-07T10:00:01Z"]),
    "queue": st.fixed_dictionaries({"BE": st.fixed_dictionaries({
        "count": st.integers(0, 3),
        "jobs": st.lists(_brief.map(lambda b: {**b, "forecast_start": "2026-12-07T11:00:00Z"}), max_size=3)})}),
})


@settings(max_examples=300, deadline=None)
@given(_shared, _shared, st.integers(1, 3), st.booleans())
def test_one_comparison_of_the_shared_states_serves_every_viewer(sent, new, viewer, staff):
    """What a page is sent after a change, from the changes of the shared states, applied to what the
    viewer was sent, gives what the viewer would be sent afresh; nothing of others' jobs is revealed."""
    from types import SimpleNamespace

    from portal.dashboard.selectors import changes_for_viewer, for_viewer

    user = SimpleNamespace(pk=viewer, is_staff=staff)
    delta = changes_for_viewer(changes(sent, new), user)
    assert apply_changes(for_viewer(sent, user), delta) == for_viewer(new, user)
    if not staff:
        shown = list(delta["jobs"].values()) + delta["set"].get("queue", {}).get("BE", {}).get("jobs", [])
        assert all(job["url"] is None for job in shown if job["id"] and not job["mine"])
        assert all("owner_id" not in job for job in shown)


def test_the_changes_of_a_pair_of_states_are_compared_once_for_every_page_that_asks():
    from portal.dashboard.cluster_delta import LastChanges

    first, second, third = _cluster(3), _cluster(3), _cluster(4)
    kept = LastChanges()
    a = kept.between(first, second)
    b = kept.between(second, third)  # a page that connected in between was sent the second state
    assert kept.between(first, second) is a and kept.between(second, third) is b  # neither compared again
    assert kept.between(_cluster(3), second) is not a  # an equal state that is another read: compared
    assert apply_changes(second, b) == third
