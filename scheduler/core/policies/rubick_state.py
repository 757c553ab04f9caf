"""Per-cycle state of the ``rubick`` policy (``rubick.py``): the jobs it may
reconfigure and what one ``decide`` call has changed so far."""

from __future__ import annotations

from dataclasses import dataclass, field

from scheduler.core.decisions import Decision, Reason
from scheduler.core.model import PendingJob, RunningJob, Snapshot
from scheduler.core.policies.reconfig import JobModel, Option, Pool, cpus_per_gpu, mem_per_gpu

@dataclass(slots=True)
class Live:
    """A running (or just started) reconfigurable job and its current option."""

    id: str
    model: JobModel
    opt: Option
    remaining: float  # iterations left (inf when the job declared none)
    guaranteed: bool
    movable: bool  # may be reconfigured in this cycle
    fresh: bool  # started in this cycle: resizing costs nothing
    running: RunningJob | None = None
    pending: PendingJob | None = None
    changed: bool = False

    @property
    def held(self) -> dict[str, int]:
        """What the job holds in the snapshot (before this cycle's changes)."""
        return dict(self.running.placement.parts) if self.running is not None else {}


@dataclass(slots=True)
class Cycle:
    """One ``decide`` call: the pool as changed so far, the live and newly
    started jobs, and the changes to emit."""

    snapshot: Snapshot
    now: float
    pool: Pool
    explain: bool
    live: dict[str, Live] = field(default_factory=dict)
    starts: dict[str, Live] = field(default_factory=dict)
    empty: Pool | None = None  # the cluster with nothing running: sizes are judged on it
    reconfigs: dict[str, tuple[Live, str | None, Reason]] = field(default_factory=dict)
    awaited: set[str] = field(default_factory=set)  # pending jobs running jobs shrink for
    preempted: set[str] = field(default_factory=set)  # jobs preempted in this cycle
    out: list[Decision] = field(default_factory=list)


def give_running(pool: Pool, r: RunningJob) -> None:
    """Return a running job's resources to ``pool``."""
    pool.give(dict(r.placement.parts), cpus_per_gpu(r.spec), mem_per_gpu(r.spec))


def take_running(pool: Pool, r: RunningJob) -> None:
    """Charge a running job's resources to ``pool`` again."""
    pool.take(dict(r.placement.parts), cpus_per_gpu(r.spec), mem_per_gpu(r.spec))


class EmptySizes:
    """Right sizes of jobs on the empty cluster, kept across cycles.

    ``JobModel.right_size`` on the empty cluster (and the guarantee cap
    ``fit_ceiling`` derives from it) depends only on the job's request and
    throughput function and on the nodes, yet every cycle asked it again for
    every job: profiling a Morphling run showed it as over a third of
    ``rubick``'s time. The memo is keyed by everything ``JobModel`` reads
    from the spec, keeps the throughput function it saw (so that its
    identity in a key cannot be reused by another one), and is dropped whenever the nodes change (and
    past ``LIMIT`` entries).
    Decisions are the same as without it.
    """

    LIMIT = 200_000

    def __init__(self) -> None:
        self._nodes: tuple | None = None
        self._memo: dict[tuple, object] = {}
        self._refs: dict[int, object] = {}

    def use_nodes(self, nodes_key: tuple) -> None:
        """Start a cycle on ``nodes_key``; forget everything if it differs."""
        if nodes_key != self._nodes or len(self._memo) > self.LIMIT:
            self._memo.clear()
            self._refs.clear()
            self._nodes = nodes_key

    def key(self, model: JobModel) -> tuple:
        spec = model.spec
        fn = spec.throughput
        # By identity (a throughput function need not be hashable); the memo
        # keeps a reference so that the id cannot be reused while it lives.
        self._refs[id(fn)] = fn
        return (spec.id, spec.num_gpus, spec.num_cpus, spec.mem_gb, spec.plan, spec.allowed_plans,
                spec.gpu_range, id(fn))

    def fit_ceiling(self, model: JobModel, empty: Pool) -> None:
        """``model.fit_ceiling(empty)``, memoized."""
        k = ("ceiling", self.key(model))
        if k not in self._memo:
            model.fit_ceiling(empty)
            self._memo[k] = model.guarantee
        model.guarantee = self._memo[k]  # type: ignore[assignment]

    def right_size(self, model: JobModel, empty: Pool, floor: float) -> Option | None:
        """``model.right_size(empty, floor)``, memoized."""
        k = ("size", self.key(model), model.guarantee, floor)
        if k not in self._memo:
            self._memo[k] = model.right_size(empty, floor)
        return self._memo[k]  # type: ignore[return-value]

