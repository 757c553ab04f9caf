"""Shared machinery of the reconfiguration-aware policies (``rubick``,
``fitgpp-shrink``): a free-resource pool that can take and give back, placement
of a GPU count, and one job's allocation options as its throughput function
sees them.

Throughputs are *normalized*: a job's speed on an allocation divided by its
speed on what it asked for (``JobSpec.throughput.reference()``), so 1.0 means
"as fast as requested". Different models process different samples per
second; normalizing makes them comparable and makes a guaranteed job's floor
exactly 1.0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

from scheduler.core.model import JobSpec, NodeCapacity, Placement, RunningJob
from scheduler.core.placement import EPS, INF, free_from_running, full_free, plan_block, spread, units_of

FLOOR_SLACK = 1e-9
"""Tolerance when comparing a normalized throughput with a floor of 1.0."""


class Pool:
    """Free GPUs, CPUs and memory per node during one ``decide`` call.

    A working copy: ``take`` and ``give`` change it, the snapshot is never
    modified. CPU or memory a node does not track is ``inf``.
    """

    __slots__ = ("free", "order")

    def __init__(self, free: Mapping[str, tuple[int, float, float]]) -> None:
        self.free: dict[str, list[float]] = {n: [g, c, m] for n, (g, c, m) in free.items()}
        self.order = sorted(self.free)

    @staticmethod
    def of(nodes: Sequence[NodeCapacity], running: Iterable[RunningJob], free: Mapping | None) -> "Pool":
        return Pool(free if free is not None else free_from_running(nodes, running))

    @property
    def gpus(self) -> int:
        return int(sum(max(v[0], 0) for v in self.free.values()))

    def units(self, name: str, cpg: float, mpg: float) -> int:
        g, c, m = self.free[name]
        return units_of(int(g), c, m, cpg, mpg)

    def fits(self, parts: Mapping[str, int], cpg: float, mpg: float) -> bool:
        return all(self.units(n, cpg, mpg) >= k for n, k in parts.items())

    def take(self, parts: Mapping[str, int], cpg: float, mpg: float) -> None:
        for n, k in parts.items():
            v = self.free[n]
            v[0] -= k
            v[1] -= k * cpg
            v[2] -= k * mpg

    def give(self, parts: Mapping[str, int], cpg: float, mpg: float) -> None:
        for n, k in parts.items():
            v = self.free[n]
            v[0] += k
            v[1] += k * cpg
            v[2] += k * mpg

    def place(self, g: int, cpg: float, mpg: float, prefer: Iterable[str] = ()) -> dict[str, int] | None:
        """Where ``g`` GPUs (each with ``cpg`` CPUs and ``mpg`` GB) go now:
        one node if possible (the fullest that holds them, nodes in ``prefer``
        first), else the fewest nodes (``scheduler.core.placement.spread``).
        Takes nothing."""
        if g < 1:
            return None
        pref = set(prefer)
        best = None
        for name in self.order:
            u = self.units(name, cpg, mpg)
            if u >= g:
                key = (name not in pref, u - g, name)
                if best is None or key < best:
                    best = key
        if best is not None:
            return {best[2]: g}
        avail = [(u, n) for n in self.order if (u := self.units(n, cpg, mpg)) > 0]
        return spread(avail, g)

    def place_most_free(self, g: int, cpg: float, mpg: float) -> dict[str, int] | None:
        """``g`` GPUs taken greedily from the node with the most free units
        (ties: node order), as the Pollux study's Tiresias places: a job
        spreads over nodes whenever no single node has room enough, and
        small jobs land on the emptiest nodes. Takes nothing."""
        avail = {n: u for n in self.order if (u := self.units(n, cpg, mpg)) > 0}
        if g < 1 or sum(avail.values()) < g:
            return None
        parts: dict[str, int] = {}
        left = g
        while left:
            name = max(avail, key=avail.__getitem__)
            k = min(avail.pop(name), left)
            parts[name] = k
            left -= k
        return parts

    def place_blocks(self, g: int, block: int, cpg: float, mpg: float,
                     prefer: Iterable[str] = ()) -> dict[str, int] | None:
        """``g`` GPUs in whole blocks of ``block`` GPUs per node (a 3D plan's
        tensor-parallel group must sit on one node): one node if possible,
        else the fewest nodes. ``block`` 1 is ``place``."""
        if block <= 1 or g % block:
            return self.place(g, cpg, mpg, prefer)
        single = self.place(g, cpg, mpg, prefer)
        if single is not None and len(single) == 1:
            return single
        avail = [(u // block, n) for n in self.order if (u := self.units(n, cpg, mpg)) >= block]
        parts = spread(avail, g // block)
        return None if parts is None else {n: k * block for n, k in parts.items()}


def shape_of(parts: Mapping[str, int]) -> tuple[int, ...]:
    """GPUs per node of a placement, ascending (the throughput functions' key)."""
    return tuple(sorted(k for k in parts.values() if k > 0))


def placement_of(parts: Mapping[str, int]) -> Placement:
    return Placement.of(dict(parts))


def shrink_parts(parts: Mapping[str, int], drop: int, on: str | None = None) -> dict[str, int] | None:
    """``parts`` minus ``drop`` GPUs: from node ``on`` only when given, else
    from the smallest shares first (ties: the node name sorting last), which
    keeps the job on as few nodes as possible. None if there are not enough."""
    out = dict(parts)
    if on is not None:
        if out.get(on, 0) < drop:
            return None
        out[on] -= drop
    else:
        left = drop
        while left > 0:
            if not out:
                return None
            name = min(out, key=lambda n: (out[n], [-ord(c) for c in n]))
            take = min(out[name], left)
            out[name] -= take
            left -= take
            if out[name] == 0:
                del out[name]
    return {n: k for n, k in out.items() if k > 0}


@dataclass(frozen=True, slots=True)
class Option:
    """One allocation of a job: where, which plan, its seconds per iteration
    and its normalized throughput."""

    parts: tuple[tuple[str, int], ...]
    cpus: float
    plan: str
    seconds: float
    speed: float

    @property
    def gpus(self) -> int:
        return sum(k for _, k in self.parts)

    @property
    def as_dict(self) -> dict[str, int]:
        return dict(self.parts)


def cpus_per_gpu(spec: JobSpec) -> float:
    """CPUs per GPU the job asked for (0: it did not say)."""
    return spec.num_cpus / spec.num_gpus if spec.num_gpus else 0.0


def mem_per_gpu(spec: JobSpec) -> float:
    return spec.mem_gb / spec.num_gpus if spec.num_gpus else 0.0


class JobModel:
    """One reconfigurable job as the policy sees it: its request (``spec`` as
    submitted, or as pending), the throughput function and the reference."""

    __slots__ = ("spec", "fn", "ref", "cpg", "mpg", "lo", "hi", "blocks", "guarantee")

    def __init__(self, spec: JobSpec, request: JobSpec | None = None) -> None:
        req = request or spec
        self.spec = req
        self.fn = req.throughput
        self.ref = self.fn.reference()
        self.cpg = cpus_per_gpu(req)
        self.mpg = mem_per_gpu(req)
        self.lo, self.hi = req.gpu_range
        self.blocks = sorted({plan_block(p) for p in (req.plan, *req.allowed_plans)} - {1})
        self.guarantee = 1.0  # lowered only when no allocation of the cluster reaches the request
        # (then every floor a policy applies to the job is capped at it)

    def fit_ceiling(self, empty: "Pool") -> None:
        """Cap the guarantee at the best the whole (empty) cluster allows,
        when even that does not reach the requested throughput."""
        if self.right_size(empty, 1.0) is None:
            best = max((o.speed for g in range(self.lo, min(self.hi, empty.gpus) + 1)
                        if (o := self.place(empty, g)) is not None), default=0.0)
            self.guarantee = min(1.0, best)

    def option(self, parts: Mapping[str, int], cpus: float | None = None) -> Option | None:
        """The best plan on ``parts`` with ``cpus`` (None: the request's ratio)."""
        g = sum(parts.values())
        threads = self.cpg * g if cpus is None else cpus
        best = self.fn.best(shape_of(parts), threads or None)
        if best is None:
            return None
        plan, seconds = best
        return Option(tuple(sorted(parts.items())), threads, plan, seconds, self.ref / seconds)

    def speed_of(self, plan: str, parts: Mapping[str, int], cpus: float) -> float | None:
        """Normalized throughput of a given plan there (None: it cannot run)."""
        t = self.fn.time(plan, shape_of(parts), cpus or None) if hasattr(self.fn, "time") else None
        if t is None:
            best = self.fn.best(shape_of(parts), cpus or None)
            if best is None or best[0] != plan:
                return None
            t = best[1]
        return self.ref / t

    def place(self, pool: Pool, g: int, prefer: Iterable[str] = ()) -> Option | None:
        """Best option for ``g`` GPUs where the pool would put them: by the
        shared rule, or in blocks of each tensor-parallel degree the job's
        3D plans use (the faster wins; ties to the shared rule)."""
        best: Option | None = None
        tried: list[dict[str, int]] = []
        for block in (1, *self.blocks):
            parts = pool.place_blocks(g, block, self.cpg, self.mpg, prefer)
            if parts is None or parts in tried:
                continue
            tried.append(parts)
            opt = self.option(parts)
            if opt is not None and (best is None or opt.speed > best.speed + FLOOR_SLACK):
                best = opt
        return best

    def right_size(self, pool: Pool | None, floor: float = 1.0, prefer: Iterable[str] = ()) -> Option | None:
        """The fewest GPUs reaching ``floor`` (1.0: the requested throughput),
        placed in ``pool`` (None: judged on packed nodes). None when no count
        in the job's range reaches it there."""
        for g in range(self.lo, self.hi + 1):
            if pool is None:
                opt = self.option(_packed(g))
            else:
                opt = self.place(pool, g, prefer)
            if opt is not None and opt.speed >= floor - FLOOR_SLACK:
                return opt
            if pool is not None and pool.gpus < g:
                return None
        return None


def _packed(g: int, node_gpus: int = 8) -> dict[str, int]:
    full, rest = divmod(g, node_gpus)
    parts = {f"_{i}": node_gpus for i in range(full)}
    if rest:
        parts[f"_{full}"] = rest
    return parts


def node_free_map(nodes: Sequence[NodeCapacity]) -> dict[str, tuple[int, float, float]]:
    return full_free(nodes)


__all__ = [
    "EPS",
    "FLOOR_SLACK",
    "INF",
    "JobModel",
    "Option",
    "Pool",
    "cpus_per_gpu",
    "mem_per_gpu",
    "node_free_map",
    "placement_of",
    "shape_of",
    "shrink_parts",
]
