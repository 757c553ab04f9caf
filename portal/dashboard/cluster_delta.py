"""What changed between two cluster states, so that an open cluster page is sent that instead of the whole.

At 1,000 nodes the cluster page's state is about 1.7 MB, and a change (a job started, a node's heartbeat)
touches a few nodes of it. A page that asks for changes (``/ws/cluster/?changes=1``) gets the whole state
once, then ``changes(sent, new)`` after every change: the nodes and jobs that differ, the names of those
gone, and every other top-level entry (totals, queue, utilization, ``generated_at``) that differs, whole.
``apply_changes(sent, changes)`` gives ``new`` back; ``static/dashboard/cluster.js`` does the same in the
browser. Both states are ``selectors.for_viewer`` states: they have ``nodes``, a list of dicts each named
by a distinct ``name``, and ``jobs``, a dict by job id.

Changes are relative to what was last sent on the same socket; a socket delivers in order and a page that
reconnects gets the whole state again, so a page never applies changes to a state it does not hold.
"""

from __future__ import annotations

#: The entries compared item by item; every other top-level entry is compared and sent whole.
_ITEMISED = ("nodes", "jobs")


def changes(sent: dict, new: dict) -> dict:
    """What turns ``sent`` into ``new``:

    * ``set``: each top-level entry other than ``nodes`` and ``jobs`` that differs or is new, whole;
    * ``unset``: the names of top-level entries gone (present only when some are);
    * ``nodes``: each node (a dict of the ``nodes`` list) that differs from the node of its name or is new;
    * ``node_order``: every node's name in order, present only when the names or their order changed;
    * ``jobs``: each job (``jobs`` entry) that differs or is new, by id; ``jobs_gone``: the ids gone.
    """
    out: dict = {"set": {k: v for k, v in new.items() if k not in _ITEMISED and (k not in sent or sent[k] != v)}}
    unset = [k for k in sent if k not in new and k not in _ITEMISED]
    if unset:
        out["unset"] = unset
    old_nodes = {node["name"]: node for node in sent["nodes"]}
    new_nodes = new["nodes"]
    out["nodes"] = [node for node in new_nodes if old_nodes.get(node["name"]) != node]
    names = [node["name"] for node in new_nodes]
    if names != list(old_nodes):
        out["node_order"] = names
    old_jobs, new_jobs = sent["jobs"], new["jobs"]
    out["jobs"] = {key: job for key, job in new_jobs.items() if old_jobs.get(key) != job}
    out["jobs_gone"] = [key for key in old_jobs if key not in new_jobs]
    return out


def apply_changes(sent: dict, delta: dict) -> dict:
    """``sent`` with ``delta`` (from ``changes(sent, new)``) applied: equal to ``new``. ``sent`` is not
    changed; unchanged nodes and jobs are shared with it."""
    state = {k: v for k, v in sent.items() if k not in delta.get("unset", ())}
    state.update(delta["set"])
    by_name = {node["name"]: node for node in sent["nodes"]}
    by_name.update((node["name"], node) for node in delta["nodes"])
    order = delta.get("node_order")
    if order is None:
        order = [node["name"] for node in sent["nodes"]]
    state["nodes"] = [by_name[name] for name in order]
    jobs = dict(sent["jobs"])
    jobs.update(delta["jobs"])
    for key in delta["jobs_gone"]:
        jobs.pop(key, None)
    state["jobs"] = jobs
    return state



class LastChanges:
    """The changes between recent pairs of states, kept: the pages of a process that refresh after the same
    change compare the same pair of shared reads (``portal.shared_read``), so one comparison serves them
    all; a few pairs are kept, since a page that connected between two changes was sent another read than
    the rest. States are told apart by identity (a shared read is never changed once made)."""

    KEPT = 4

    def __init__(self) -> None:
        self._kept: list[tuple[dict, dict, dict]] = []  # (sent, new, changes), newest last

    def between(self, sent: dict, new: dict) -> dict:
        for old_sent, old_new, found in self._kept:
            if old_sent is sent and old_new is new:
                return found
        found = changes(sent, new)
        self._kept = [*self._kept[-(self.KEPT - 1):], (sent, new, found)]
        return found
