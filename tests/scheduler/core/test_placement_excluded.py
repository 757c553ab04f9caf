"""A job's ``excluded_nodes`` (nodes where its image was unavailable) are never used: by the
placement rule itself and by the queue policies that place through it (property tests)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.core.decisions import Start
from scheduler.core.model import JobClass, JobSpec, NodeCapacity, PendingJob, Snapshot
from scheduler.core.placement import FreeCapacity, full_free
from scheduler.core.policy import make_policy

NAMES = ["a", "b", "c", "d"]

clusters = st.lists(st.integers(min_value=1, max_value=8), min_size=1, max_size=4).map(
    lambda sizes: [NodeCapacity(name=NAMES[i], gpus=g) for i, g in enumerate(sizes)])


@settings(max_examples=200, deadline=None)
@given(clusters, st.integers(min_value=1, max_value=16), st.sets(st.sampled_from(NAMES)))
def test_placement_never_uses_an_excluded_node(node_list, need, excluded) -> None:  # noqa: ANN001
    spec = JobSpec(id="j", job_class=JobClass.BE, num_gpus=need, submit_time=0.0, excluded_nodes=frozenset(excluded))
    cap = FreeCapacity(full_free(node_list))
    got = cap.place(spec)
    allowed = {n.name: n.gpus for n in node_list if n.name not in excluded}
    # a BE job goes wherever the allowed nodes have room together, and nowhere else
    assert (got is not None) == (need <= sum(allowed.values()))
    if got is not None:
        assert not set(got.nodes) & excluded
        assert got.num_gpus == need


@settings(max_examples=100, deadline=None)
@given(clusters, st.lists(st.tuples(st.integers(min_value=1, max_value=8), st.sets(st.sampled_from(NAMES))),
                          min_size=1, max_size=6),
       st.sampled_from(["fifo", "fitgpp"]))
def test_queue_policies_never_start_a_job_on_a_node_it_excludes(node_list, jobs, policy_name) -> None:  # noqa: ANN001
    pending = [PendingJob(spec=JobSpec(id=f"j{i}", job_class=JobClass.BE, num_gpus=g, submit_time=float(i),
                                       excluded_nodes=frozenset(ex)))
               for i, (g, ex) in enumerate(jobs)]
    excluded = {p.spec.id: p.spec.excluded_nodes for p in pending}
    decisions = make_policy(policy_name).decide(Snapshot(nodes=node_list, pending=pending), 100.0)
    for d in decisions:
        if isinstance(d, Start):
            assert not set(d.placement.nodes) & excluded[d.job_id], (policy_name, d)


def test_without_exclusions_placement_is_unchanged() -> None:
    node_list = [NodeCapacity(name="a", gpus=4), NodeCapacity(name="b", gpus=2)]
    plain = JobSpec(id="j", job_class=JobClass.BE, num_gpus=2, submit_time=0.0)
    assert FreeCapacity(full_free(node_list)).place(plain).nodes == ("b",)
    avoiding = JobSpec(id="j", job_class=JobClass.BE, num_gpus=2, submit_time=0.0, excluded_nodes=frozenset({"b"}))
    assert FreeCapacity(full_free(node_list)).place(avoiding).nodes == ("a",)
