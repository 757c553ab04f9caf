"""Where a job fits: free capacity per node and the placement rule.

Rule (the same for every policy):

* A job asks for ``num_gpus`` >= 1 GPUs and optionally ``num_cpus`` and
  ``mem_gb`` (0 means "no constraint"). CPU and memory are charged per node in
  proportion to the GPUs placed there, so a job's need is expressed in *units*:
  one unit is one GPU plus ``num_cpus / num_gpus`` CPUs plus
  ``mem_gb / num_gpus`` GB.
* A node whose ``cpus`` (or ``mem_gb``) is 0 does not track that resource: it
  never limits a placement there.
* Resources held by running jobs, including jobs vacating after a preemption
  notice, are not free.
* If the job fits on one node, it goes on the node that leaves the fewest free
  GPUs (best fit), ties broken by node name. Otherwise it is spread over the
  fewest nodes: the nodes with the most free units, the last one chosen by best
  fit for the remainder; all or nothing.
* A job whose plan is 3D (``"<pp><tp><dp>"``, see ``scheduler.core.perf.plans``)
  is placed in whole tensor-parallel groups: every node it uses gets a
  multiple of ``tp`` GPUs (``node_block``), as the plan-keeping policies
  (``fixed_plan.py``) place it. The constraint belongs to the job, not to a
  policy: a tensor-parallel group exchanges activations at every layer, so
  split over nodes it runs at network speed, and not at all when no node
  holds a whole group. A job without a plan, or with a data-parallel one,
  has a block of 1 GPU: the rule above, unchanged.

``FreeCapacity`` is the working copy a policy uses during one ``decide`` call:
each ``take`` (a Start) or ``claim`` (capacity promised to a waiting job) lowers
it, so the Starts a policy returns are jointly feasible. ``FreeLedger`` is the
incrementally maintained free map a simulator may pass as ``Snapshot.free``.
"""

from __future__ import annotations

import bisect
import math
from functools import lru_cache
from typing import Iterable, Iterator, Mapping, Sequence

from scheduler.core.model import JobSpec, NodeCapacity, Placement, RunningJob

EPS = 1e-6
"""Slack for float CPU/memory arithmetic: proportional charges such as 10/3 CPUs
per GPU must not make an exactly full node look over-full."""

INF = math.inf

FreeMap = Mapping[str, tuple[int, float, float]]


def per_unit(spec: JobSpec) -> tuple[float, float]:
    """CPUs and GB of memory per GPU the job needs (0.0: unconstrained)."""
    g = spec.num_gpus
    if g < 1:
        raise ValueError(f"job {spec.id}: num_gpus must be >= 1, got {g}")
    return spec.num_cpus / g, spec.mem_gb / g


def node_block(spec: JobSpec) -> int:
    """GPUs of ``spec`` that must share a node: the tensor-parallel degree of
    a 3D plan that divides the job's GPUs, else 1 (no plan, a data-parallel
    plan, or a plan that does not parse: the placement rule does not judge
    plans, the job's submission does)."""
    plan = spec.plan
    if not plan:
        return 1
    tp = plan_block(plan)
    return tp if tp > 1 and spec.num_gpus % tp == 0 else 1


@lru_cache(maxsize=256)
def plan_block(plan: str) -> int:
    """GPUs a plan needs on one node: the tensor-parallel degree of a 3D plan, else 1
    (also for an empty plan or one that does not parse)."""
    # Imported here: the perf package loads numpy, which jobs without a plan
    # (every queue policy's usual input) should not pay for at import time.
    from scheduler.core.perf.plans import PlanError, parse_plan

    try:
        parsed = parse_plan(plan)
    except PlanError:
        return 1
    return parsed.tp if parsed.is_3d else 1


def node_charges(spec: JobSpec, placement: Placement) -> list[tuple[str, int, float, float]]:
    """``(node, gpus, cpus, mem_gb)`` the job holds on each node of ``placement``."""
    g = spec.num_gpus
    return [(n, k, spec.num_cpus * k / g, spec.mem_gb * k / g) for n, k in placement.parts]


def full_free(nodes: Iterable[NodeCapacity]) -> dict[str, tuple[int, float, float]]:
    """The free map of an empty cluster (untracked CPU/memory as ``inf``)."""
    return {n.name: (n.gpus, n.cpus if n.cpus > 0 else INF, n.mem_gb if n.mem_gb > 0 else INF) for n in nodes}


def free_from_running(nodes: Iterable[NodeCapacity], running: Iterable[RunningJob]) -> dict[str, tuple[int, float, float]]:
    """Free ``(gpus, cpus, mem_gb)`` per node: capacity minus everything held.

    Raises ``ValueError`` naming the job when a running job sits on a node the
    snapshot does not list.
    """
    gpus: dict[str, int] = {}
    cpus: dict[str, float] = {}
    mem: dict[str, float] = {}
    for n in nodes:
        gpus[n.name] = n.gpus
        cpus[n.name] = n.cpus if n.cpus > 0 else INF
        mem[n.name] = n.mem_gb if n.mem_gb > 0 else INF
    for r in running:
        spec = r.spec
        g = spec.num_gpus
        for name, k in r.placement.parts:
            if name not in gpus:
                raise ValueError(f"running job {spec.id}: placed on unknown node {name!r}")
            gpus[name] -= k
            if spec.num_cpus:
                cpus[name] -= spec.num_cpus * k / g
            if spec.mem_gb:
                mem[name] -= spec.mem_gb * k / g
    return {name: (gpus[name], cpus[name], mem[name]) for name in gpus}


class FreeLedger:
    """A free map kept up to date as jobs start and vacate.

    The simulator holds one, calls ``hold`` when a job starts and ``release``
    when it leaves its resources, and passes ``ledger.free`` as
    ``Snapshot.free``. ``hold`` raises ``ValueError`` when the placement does
    not fit (a policy bug), naming the job and node.
    """

    __slots__ = ("free",)

    def __init__(self, nodes: Iterable[NodeCapacity]) -> None:
        self.free: dict[str, tuple[int, float, float]] = full_free(nodes)

    def hold(self, spec: JobSpec, placement: Placement) -> None:
        if placement.num_gpus != spec.num_gpus:
            raise ValueError(f"job {spec.id}: placement has {placement.num_gpus} GPUs, job needs {spec.num_gpus}")
        for name, k, c, m in node_charges(spec, placement):
            if name not in self.free:
                raise ValueError(f"job {spec.id}: unknown node {name!r}")
            g0, c0, m0 = self.free[name]
            if k > g0 or c > c0 + EPS or m > m0 + EPS:
                raise ValueError(
                    f"job {spec.id}: does not fit on {name} (needs {k} GPUs, {c:g} CPUs, {m:g} GB; "
                    f"free {g0} GPUs, {c0:g} CPUs, {m0:g} GB)"
                )
        for name, k, c, m in node_charges(spec, placement):
            g0, c0, m0 = self.free[name]
            self.free[name] = (g0 - k, c0 - c, m0 - m)

    def release(self, spec: JobSpec, placement: Placement) -> None:
        for name, k, c, m in node_charges(spec, placement):
            g0, c0, m0 = self.free[name]
            self.free[name] = (g0 + k, c0 + c, m0 + m)


def units_of(g: int, c: float, m: float, cpg: float, mpg: float) -> int:
    """How many units of a job (``cpg`` CPUs and ``mpg`` GB per GPU) fit in
    ``g`` GPUs, ``c`` CPUs and ``m`` GB. (Called millions of times in a
    simulated run: comparisons instead of ``min``/``max`` calls.)"""
    u = g
    if cpg and c < INF:
        k = math.floor(c / cpg + EPS)
        if k < u:
            u = k
    if mpg and m < INF:
        k = math.floor(m / mpg + EPS)
        if k < u:
            u = k
    return 0 if 0 > u else u


class FreeCapacity:
    """Free capacity during one scheduling cycle (a working copy; the snapshot
    is never modified).

    GPUs are copied per node; CPU and memory are read from the base map and
    only the amounts taken in this cycle are recorded, because most jobs and
    nodes never constrain them. The cluster's free-GPU total is kept up to
    date on every change, and the nodes are indexed by free-GPU count
    (``_BestFitIndex``) once the first single-node placement is searched, so
    best fit looks at the few smallest sufficient counts instead of every node.
    """

    __slots__ = ("gpus", "version", "touched", "_base", "_cpu_taken", "_mem_taken", "_max", "_total", "_nofit", "_index")

    def __init__(self, free: FreeMap) -> None:
        self._base = free
        self.gpus: dict[str, int] = {name: v[0] for name, v in free.items()}
        self._cpu_taken: dict[str, float] = {}
        self._mem_taken: dict[str, float] = {}
        self.version = 0  # bumped on every change, for callers' caches
        self.touched: set[str] = set()  # nodes changed since a caller last cleared it
        self._total = sum(g for g in self.gpus.values() if g > 0)
        self._max: int | None = None
        # Shapes (num_gpus, cpus/GPU, mem/GPU, blocked nodes, node block) known not to fit
        # in the current state; cleared whenever capacity is taken. Queues hold
        # many jobs of few shapes, so this keeps a long queue O(pending).
        self._nofit: set[tuple[int, float, float, frozenset[str], int]] = set()
        self._index: _BestFitIndex | None = None  # built on the first best-fit search

    @staticmethod
    def of(snapshot_nodes: Sequence[NodeCapacity], running: Iterable[RunningJob], free: FreeMap | None) -> "FreeCapacity":
        """Working copy from ``Snapshot.free`` when given, else from ``running``."""
        return FreeCapacity(free if free is not None else free_from_running(snapshot_nodes, running))

    # --- reading -----------------------------------------------------------

    @property
    def total_gpus(self) -> int:
        """Free GPUs in the whole cluster (nodes over-committed count as 0)."""
        return self._total

    @property
    def max_gpus(self) -> int:
        """The most free GPUs on any one node."""
        if self._max is None:
            index = self._index
            self._max = index.max_count() if index is not None else max(self.gpus.values(), default=0)
        return self._max

    def cpus(self, name: str) -> float:
        return self._base[name][1] - self._cpu_taken.get(name, 0.0)

    def mem(self, name: str) -> float:
        return self._base[name][2] - self._mem_taken.get(name, 0.0)

    def triple(self, name: str) -> tuple[int, float, float]:
        """Free (GPUs, CPUs, memory) on node ``name`` now."""
        base = self._base[name]
        return self.gpus[name], base[1] - self._cpu_taken.get(name, 0.0), base[2] - self._mem_taken.get(name, 0.0)

    def units(self, name: str, cpg: float, mpg: float) -> int:
        """Units of a job shape that fit on node ``name`` now."""
        g = self.gpus[name]
        if not (cpg or mpg) or g <= 0:
            return max(g, 0)
        return units_of(g, self.cpus(name), self.mem(name), cpg, mpg)

    # --- placing -----------------------------------------------------------

    def place(self, spec: JobSpec, blocked: frozenset[str] = frozenset()) -> Placement | None:
        """Where ``spec`` would go now (see the module rule), avoiding the
        ``blocked`` nodes and the job's own ``excluded_nodes``; None when it
        does not fit. Does not take anything. A job with a 3D plan gets a
        multiple of its tensor-parallel degree on every node (``node_block``)."""
        if spec.excluded_nodes:
            blocked = blocked | spec.excluded_nodes
        g = spec.num_gpus
        if g > self._total:
            return None
        cpg, mpg = per_unit(spec)
        block = node_block(spec) if spec.plan else 1
        key = (g, cpg, mpg, blocked, block)
        if key in self._nofit:
            return None
        if g <= self.max_gpus:
            # One node holds whole groups of any block size dividing g.
            name = self._best_single(g, cpg, mpg, blocked)
            if name is not None:
                return Placement(((name, g),))
        parts = self._spread(g, cpg, mpg, blocked, block)
        if parts is None:
            self._nofit.add(key)
            return None
        return Placement(tuple(sorted(parts.items())))

    def _best_single(self, g: int, cpg: float, mpg: float, blocked: frozenset[str]) -> str | None:
        """The node of least (free GPUs left, name) that holds ``g`` units:
        nodes are visited by free-GPU count from ``g`` up, by name within a
        count, so the first acceptable one is the answer."""
        index = self._index
        if index is None:
            index = self._index = _BestFitIndex(self.gpus)
        constrained = bool(cpg or mpg)
        for name in index.from_count(g):
            if blocked and name in blocked:
                continue
            if constrained and units_of(self.gpus[name], self.cpus(name), self.mem(name), cpg, mpg) < g:
                continue
            return name
        return None

    def _spread(self, g: int, cpg: float, mpg: float, blocked: frozenset[str], block: int = 1) -> dict[str, int] | None:
        """``g`` units over the fewest nodes. With ``block`` > 1 (dividing
        ``g``) each node offers only whole blocks, so ``spread`` fills every
        node it uses with a multiple of ``block``: the nodes it fills whole
        offer multiples, and the remainder it puts on the last node is ``g``
        minus multiples."""
        if block > 1:
            avail = [
                (u - u % block, name)
                for name in self.gpus
                if not (blocked and name in blocked) and (u := self.units(name, cpg, mpg)) >= block
            ]
        else:
            avail = [
                (u, name)
                for name in self.gpus
                if not (blocked and name in blocked) and (u := self.units(name, cpg, mpg)) > 0
            ]
        return spread(avail, g)

    # --- taking ------------------------------------------------------------

    def take(self, spec: JobSpec, placement: Placement) -> None:
        """Record that ``spec`` starts on ``placement``. Raises ``ValueError``
        if it does not fit (a policy bug)."""
        cpg, mpg = per_unit(spec)
        for name, k in placement.parts:
            if self.units(name, cpg, mpg) < k:
                raise ValueError(f"job {spec.id}: {k} GPUs do not fit on {name}")
        for name, k in placement.parts:
            self.claim(name, k, k * cpg, k * mpg)

    def claim(self, name: str, gpus: int, cpus: float = 0.0, mem: float = 0.0) -> None:
        """Take resources on one node (a Start, or capacity held for a job
        waiting on a preemption)."""
        if gpus:
            before = self.gpus[name]
            after = self.gpus[name] = before - gpus
            self._total += (after if after > 0 else 0) - (before if before > 0 else 0)
            if self._index is not None:
                self._index.move(name, before, after)
        if cpus:
            self._cpu_taken[name] = self._cpu_taken.get(name, 0.0) + cpus
        if mem:
            self._mem_taken[name] = self._mem_taken.get(name, 0.0) + mem
        self._max = None
        self._nofit.clear()
        self.version += 1
        self.touched.add(name)


class _BestFitIndex:
    """Node names grouped by free-GPU count, each group sorted by name, for
    best-fit search: visiting the groups from a count up, names in order,
    meets the nodes in (free GPUs, name) order. Moving a node between groups
    costs a bisection and a list insert (node counts are in the thousands)."""

    __slots__ = ("_groups", "_counts")

    def __init__(self, gpus: Mapping[str, int]) -> None:
        groups: dict[int, list[str]] = {}
        for name, g in gpus.items():
            groups.setdefault(g, []).append(name)
        for names in groups.values():
            names.sort()
        self._groups = groups
        self._counts = sorted(groups)  # every count that has had a group, ascending

    def from_count(self, g: int) -> Iterator[str]:
        """Names of the nodes with at least ``g`` free GPUs, in (count, name) order."""
        groups = self._groups
        counts = self._counts
        for i in range(bisect.bisect_left(counts, g), len(counts)):
            yield from groups[counts[i]]

    def max_count(self) -> int:
        """The largest free-GPU count of any node (0 without nodes)."""
        groups = self._groups
        return next((c for c in reversed(self._counts) if groups[c]), 0)

    def move(self, name: str, before: int, after: int) -> None:
        """Node ``name`` went from ``before`` to ``after`` free GPUs."""
        old = self._groups[before]
        del old[bisect.bisect_left(old, name)]
        new = self._groups.get(after)
        if new is None:
            new = self._groups[after] = []
            bisect.insort(self._counts, after)
        bisect.insort(new, name)


def spread(avail: list[tuple[int, str]], g: int) -> dict[str, int] | None:
    """Split ``g`` units over the fewest nodes of ``avail`` (``(units, name)``).

    The nodes with the most units are filled first; the last node is the best
    fit for the remainder among the rest, so large free blocks stay intact.
    None when the total is short.
    """
    if sum(u for u, _ in avail) < g:
        return None
    avail.sort(key=lambda t: (-t[0], t[1]))
    parts: dict[str, int] = {}
    left = g
    for i, (u, name) in enumerate(avail):
        if u >= left:
            # Last node: the smallest block (then name) that still holds the rest.
            best = min((t for t in avail[i:] if t[0] >= left), key=lambda t: (t[0], t[1]))
            parts[best[1]] = left
            return parts
        parts[name] = u
        left -= u
    return None  # unreachable: the total was checked above
