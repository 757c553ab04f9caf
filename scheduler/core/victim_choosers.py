"""How victims are chosen: the chooser protocols the planner calls, the
per-node cache they share across a cycle's TE jobs, the covering rules every
chooser uses, and the two baseline choosers (newest first, random).

``fitgpp``'s chooser (``scheduler.core.policies.fitgpp``) implements the same
protocols with a score.
"""

from __future__ import annotations

import random
from typing import Callable, Iterable, Protocol, Sequence, runtime_checkable

from scheduler.core.victims import Candidate, Need, HostView

_MISSING = object()


class NodeMemo:
    """Per-node results computed from a shared view, reused by every TE job of
    the cycle until that node changes (a Start, a claim, a victim or vacating
    job spoken for). Cached lists must not be modified by their users."""

    __slots__ = ("_by_node",)

    def __init__(self) -> None:
        self._by_node: dict[str, dict[tuple[object, ...], object]] = {}

    def get(self, view: HostView, key: tuple[object, ...], compute: Callable[[], object]) -> object:
        if not view.shared:
            return compute()
        d = self._by_node.setdefault(view.name, {})
        got = d.get(key, _MISSING)
        if got is _MISSING:
            got = d[key] = compute()
        return got

    def drop(self, name: str) -> None:
        self._by_node.pop(name, None)


class VictimChooser(Protocol):
    """The policy-specific part: pick victims on one node, and order victims
    for the multi-node greedy."""

    def single(
        self, need: Need, views: Sequence[HostView], memo: NodeMemo
    ) -> tuple[HostView, list[Candidate], float | None] | None:
        """Among ``views`` (nodes that could host the whole job with all their
        candidates preempted), the node and victim set to use, plus a score if
        the chooser has one. ``memo`` caches per-node work across TE jobs."""
        ...

    def order(self, need: Need, cands: list[Candidate], nodes: frozenset[str]) -> list[Candidate]:
        """Candidates in the order the multi-node greedy should take them."""
        ...


@runtime_checkable
class BoundedChooser(Protocol):
    """A chooser whose ``single`` returns the node of least ``rank`` and can
    bound it from below per node; the planner then keeps the nodes in a heap
    across the TE jobs of a cycle instead of scanning them per job."""

    def floor(self, view: HostView, now: float) -> tuple:
        """A lower bound on every ``rank`` the node can have for any TE job
        (``view`` has candidates); a function of the shared view and ``now``
        only. It must never equal the rank of another node."""
        ...

    def best_on_node(self, need: Need, view: HostView, memo: NodeMemo | None) -> tuple[float, list[Candidate]] | None:
        """The node's best (score, victims), or None; cached in ``memo`` unless it is None (a
        caller that keeps the result itself)."""
        ...

    def rank(self, score: float, victims: Sequence[Candidate], name: str) -> tuple:
        """``single`` returns the node of least rank among its views; no
        rank of a node is below its ``floor``."""
        ...


def covers(need: Need, view: HostView, victims: Iterable[Candidate]) -> bool:
    g, c, m = view.g, view.c, view.m
    name = view.name
    for v in victims:
        vg, vc, vm = v.parts[name]
        g += vg
        c += vc
        m += vm
    return need.units(g, c, m) >= need.gpus


def prefix_cover(need: Need, view: HostView, ordered: Iterable[Candidate]) -> list[Candidate] | None:
    """Take candidates in order until the node can host the job, then drop the
    ones that turned out unnecessary (last taken kept first)."""
    g, c, m = view.g, view.c, view.m
    taken: list[Candidate] = []
    for v in ordered:
        vg, vc, vm = v.parts[view.name]
        g, c, m = g + vg, c + vc, m + vm
        taken.append(v)
        if need.units(g, c, m) >= need.gpus:
            return drop_redundant(taken, lambda vs: covers(need, view, vs))
    return None


def drop_redundant(taken: list[Candidate], ok: Callable[[list[Candidate]], bool]) -> list[Candidate]:
    """Remove victims (earliest taken first) whose removal keeps ``ok``."""
    kept = list(taken)
    for v in list(taken[:-1]):
        trial = [x for x in kept if x is not v]
        if ok(trial):
            kept = trial
    return kept



class NewestChooser:
    """Victims are the most recently started jobs (the common Kubernetes
    choice). On each node, newest first until the job fits; the node needing
    the fewest victims wins, then the one whose victims started latest."""

    def single(
        self, need: Need, views: Sequence[HostView], memo: NodeMemo
    ) -> tuple[HostView, list[Candidate], float | None] | None:
        best = None
        best_key = None
        key = ("newest", need.shape)
        for view in views:
            victims = memo.get(
                view, key, lambda view=view: prefix_cover(need, view, sorted(view.cands, key=lambda x: (-x.start, x.id)))
            )
            if victims is None:
                continue
            assert isinstance(victims, list)
            k = (len(victims), -min(x.start for x in victims), view.name)
            if best_key is None or k < best_key:
                best, best_key = (view, victims, None), k
        return best

    def order(self, need: Need, cands: list[Candidate], nodes: frozenset[str]) -> list[Candidate]:
        return sorted(cands, key=lambda x: (-x.start, x.id))


class RandomChooser:
    """Victims chosen at random, reproducibly: the generator is re-seeded from
    (seed, time, TE job id) for every decision, so the same snapshot and time
    give the same victims whatever happened before."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.rng = random.Random(seed)

    def _reseed(self, need: Need) -> random.Random:
        self.rng.seed(f"{self.seed}/{need.now!r}/{need.job.spec.id}")
        return self.rng

    def single(
        self, need: Need, views: Sequence[HostView], memo: NodeMemo
    ) -> tuple[HostView, list[Candidate], float | None] | None:
        rng = self._reseed(need)
        view = rng.choice(sorted(views, key=lambda v: v.name))
        cands = sorted(view.cands, key=lambda x: x.id)
        rng.shuffle(cands)
        victims = prefix_cover(need, view, cands)
        return None if victims is None else (view, victims, None)

    def order(self, need: Need, cands: list[Candidate], nodes: frozenset[str]) -> list[Candidate]:
        rng = self._reseed(need)
        out = list(cands)
        rng.shuffle(out)
        return out



__all__ = [
    "BoundedChooser",
    "NewestChooser",
    "NodeMemo",
    "RandomChooser",
    "VictimChooser",
    "covers",
    "drop_redundant",
    "prefix_cover",
]
