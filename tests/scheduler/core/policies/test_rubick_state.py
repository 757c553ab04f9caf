"""The memo of right sizes on the empty cluster (``rubick_state.EmptySizes``)
changes no decision: one ``Rubick`` reused over many cycles decides exactly
as a fresh one does on each snapshot, also when the nodes change."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.core.model import JobClass, JobSpec, NodeCapacity, PendingJob, Placement, RunningJob, Snapshot
from scheduler.core.policies.rubick import Rubick


@dataclass(frozen=True, eq=False)
class Curve:
    """Seconds per iteration: ``base / g ** alpha`` on one node, x1.3 per extra node."""

    base: float
    alpha: float
    user_gpus: int

    def time(self, plan: str, placement: Sequence[int], cpus: float | None = None) -> float | None:
        g = sum(placement)
        return self.base / g ** self.alpha * 1.3 ** (len([k for k in placement if k]) - 1)

    def best(self, placement: Sequence[int], cpus: float | None = None):
        return ("ga", self.time("ga", placement, cpus))

    def reference(self) -> float:
        return self.time("ga", (self.user_gpus,))


def spec(i: int, gpus: int, base: float, alpha: float, guaranteed: bool) -> JobSpec:
    return JobSpec(f"j{i}", JobClass.BE, gpus, float(i), model="m", plan="ga", min_gpus=1, max_gpus=8,
                   guaranteed=guaranteed, steps=1000, throughput=Curve(base, alpha, gpus))


jobs = st.tuples(st.integers(1, 4), st.floats(0.5, 5.0), st.floats(0.3, 1.0), st.booleans())


def snapshot(nodes: list[NodeCapacity], specs: list[JobSpec], runs: list[bool]) -> Snapshot:
    running, pending, used = [], [], {n.name: 0 for n in nodes}
    for s, run in zip(specs, runs):
        g = s.num_gpus
        runs_now = run
        node = next((n for n in nodes if n.gpus - used[n.name] >= g), None)
        if runs_now and node is not None:
            used[node.name] += g
            running.append(RunningJob(s, Placement.of({node.name: g}), 0.0, 0.0, plan="ga"))
        else:
            pending.append(PendingJob(s))
    return Snapshot(nodes, running, pending)


@settings(max_examples=40, deadline=None)
@given(drawn=st.lists(jobs, min_size=1, max_size=6),
       cycles=st.lists(st.tuples(st.integers(1, 3), st.lists(st.booleans(), min_size=6, max_size=6)),
                       min_size=2, max_size=4))
def test_a_reused_policy_decides_as_a_fresh_one(drawn, cycles) -> None:
    """The same jobs (same specs, so the memo is hit) over several cycles,
    some running, on clusters of one to three nodes that change between
    cycles (so the memo is dropped)."""
    specs = [spec(i, g, base, alpha, guaranteed) for i, (g, base, alpha, guaranteed) in enumerate(drawn)]
    reused = Rubick()
    for t, (n_nodes, runs) in enumerate(cycles):
        nodes = [NodeCapacity(f"n{k}", 4) for k in range(n_nodes)]
        snap = snapshot(nodes, specs, runs)
        assert reused.decide(snap, 1000.0 * t) == Rubick().decide(snap, 1000.0 * t)
