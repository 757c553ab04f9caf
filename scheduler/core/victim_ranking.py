"""Nodes kept in rank order for a chooser with a per-node lower bound
(``BoundedChooser``), across the TE jobs of one planning cycle.

Scanning every node for every TE job that does not fit is what makes a
cycle with many such jobs slow; a chooser that can bound a node's rank from
below lets the planner keep the nodes in a heap per job shape instead and
search a node only when it comes out on top.
"""

from __future__ import annotations

import heapq
from typing import Callable, Mapping

from scheduler.core.placement import FreeCapacity
from scheduler.core.victim_choosers import BoundedChooser
from scheduler.core.victims import Candidate, Need, HostView, Shape

_MISSING = object()

#: ``key + (node, version, best found)``: key is the floor until the node is searched, then its rank.
#: Flat rather than nested: a heap compares entries hundreds of thousands of times in a large
#: cycle, and one tuple level less halves the work of each comparison.
HeapEntry = tuple

ViewOf = Callable[[str, float], HostView]


class _ShapeHeap:
    """One job shape's heap, how much of the drop log it has taken in, and
    the entries set aside for the exclusion ``aside_for``."""

    __slots__ = ("heap", "seen", "aside", "aside_for")

    def __init__(self, heap: list[HeapEntry], seen: int, exclude: frozenset[str]) -> None:
        self.heap = heap
        self.seen = seen
        self.aside: list[HeapEntry] = []
        self.aside_for = exclude


class RankedNodes:
    """Per (job shape, now), a heap of entries over the nodes that could host
    the job, kept up to date from the log of dropped nodes; an entry whose
    version is not the node's current one is stale. Built on first use, so one
    heap per shape per cycle.

    ``shared_view(name, now)``, passed to each ``best`` call (held by no
    attribute, so that the planner and its heap never refer to each other),
    gives (and caches in ``views``) a node's shared view; the planner calls
    ``drop`` for every node whose view it forgets.
    """

    def __init__(
        self,
        bounded: BoundedChooser,
        cap: FreeCapacity,
        views: Mapping[str, HostView],
    ) -> None:
        self._bounded = bounded
        self._cap = cap
        self._views = views
        self._facts: dict[str, tuple[float, tuple, tuple[int, float, float]] | None] = {}
        self._version: dict[str, int] = {}
        self._dropped: list[str] = []
        self._heaps: dict[tuple[Shape, float], _ShapeHeap] = {}
        self._potentials: dict[tuple[Shape, float], tuple[dict[str, int], list[int]]] = {}

    def drop(self, name: str) -> None:
        """The node changed: its facts are recomputed and its entries go stale."""
        self._facts.pop(name, None)
        self._version[name] = self._version.get(name, 0) + 1
        self._dropped.append(name)

    def _node_facts(self, name: str, now: float, shared_view: ViewOf) -> tuple[float, tuple, tuple[int, float, float]] | None:
        """``(now, floor, potential)`` of a node's shared view, None when it has
        no candidates: the chooser's floor on the node's rank and what the
        node would have with every candidate preempted. Neither depends on the
        TE job, so every shape's heap shares them until the node changes."""
        facts = self._facts.get(name, _MISSING)
        if facts is _MISSING or (facts is not None and facts[0] != now):  # type: ignore[index]
            view = shared_view(name, now)
            if not view.cands:
                facts = None
            else:
                g, c, m = view.g, view.c, view.m
                for v in view.cands:
                    vg, vc, vm = v.parts[name]
                    g += vg
                    c += vc
                    m += vm
                facts = (now, self._bounded.floor(view, now), (g, c, m))
            self._facts[name] = facts
        return facts  # type: ignore[return-value]

    def _heap_entry(self, name: str, need: Need, shared_view: ViewOf) -> HeapEntry | None:
        """A not yet searched node's entry: floor + (name, version, None) when
        it could host the whole job with all its candidates preempted (what
        ``covers`` checks), else None."""
        facts = self._node_facts(name, need.now, shared_view)
        if facts is None:
            return None
        g, c, m = facts[2]
        if (g if not (need.cpg or need.mpg) else need.units(g, c, m)) < need.gpus:
            return None
        return facts[1] + (name, self._version.get(name, 0), None)

    def _first_heap(self, need: Need, shared_view: ViewOf) -> list[HeapEntry]:
        """Every node's ``_heap_entry``, heapified: the loop of ``_heap_entry``
        and ``_node_facts`` written out, as it runs over every node of the
        cluster once per job shape (the facts, computed for the first shape,
        are reused by the others)."""
        facts_of, version, now = self._facts, self._version, need.now
        plain, gpus, units = not (need.cpg or need.mpg), need.gpus, need.units
        heap: list[HeapEntry] = []
        append = heap.append
        for name in self._cap.gpus:
            facts = facts_of.get(name, _MISSING)
            if facts is _MISSING or (facts is not None and facts[0] != now):  # type: ignore[index]
                facts = self._node_facts(name, now, shared_view)
            if facts is None:
                continue
            g, c, m = facts[2]  # type: ignore[index]
            if (g if plain else units(g, c, m)) < gpus:
                continue
            append(facts[1] + (name, version.get(name, 0), None))  # type: ignore[index]
        heapq.heapify(heap)
        return heap

    def potentials(self, need: Need, shared_view: ViewOf,
                   exclude: frozenset[str] = frozenset()) -> list[tuple[int, str]]:
        """``(units, name)`` of ``need``'s shape each node outside ``exclude`` would have with
        every candidate preempted (free, vacating and candidates), for the nodes where that is
        above 0, in no particular order: what a multi-node plan spreads the job over. Kept per
        (job shape, now) across the cycle's plans like the heaps, and brought up to date from
        the log of dropped nodes, so a node's potential is summed again only once it changed."""
        key = (need.shape, need.now)
        held = self._potentials.get(key)
        if held is None:
            units: dict[str, int] = {}
            for name in self._cap.gpus:
                u = self._potential(name, need, shared_view)
                if u > 0:
                    units[name] = u
            self._potentials[key] = (units, [len(self._dropped)])
        else:
            units, seen = held
            if seen[0] < len(self._dropped):
                for name in set(self._dropped[seen[0]:]):
                    u = self._potential(name, need, shared_view)
                    if u > 0:
                        units[name] = u
                    else:
                        units.pop(name, None)
                seen[0] = len(self._dropped)
        if exclude:
            return [(u, name) for name, u in units.items() if name not in exclude]
        return [(u, name) for name, u in units.items()]

    def _potential(self, name: str, need: Need, shared_view: ViewOf) -> int:
        """Units of ``need``'s shape on the node with every candidate preempted (its view's free
        and vacating units when it has no candidates)."""
        facts = self._node_facts(name, need.now, shared_view)
        if facts is None:
            view = shared_view(name, need.now)
            g, c, m = view.g, view.c, view.m
        else:
            g, c, m = facts[2]
        return g if not (need.cpg or need.mpg) else need.units(g, c, m)

    def best(self, need: Need, shared_view: ViewOf,
             exclude: frozenset[str] = frozenset()) -> tuple[HostView, list[Candidate], float | None] | None:
        """The feasible shared node of least ``rank`` outside ``exclude``, as
        ``bounded.single`` finds it among those nodes, from a heap kept across
        the cycle's TE jobs of this shape. Excluded nodes keep their entries:
        set aside while the same nodes are excluded (the planner excludes one
        reservation per cycle, so they stay aside instead of coming to the
        top again for every job), put back for a call that excludes others.

        Entries are keyed by the chooser's ``floor`` until the node is
        searched, then by its rank. When a searched node comes out on top,
        every other node has a rank (or a floor, which no rank of that node
        is below) above it, so it is the least-rank node over all, which is
        what ``single``'s early-stopping scan returns."""
        key = (need.shape, need.now)
        held = self._heaps.get(key)
        if held is None:
            heap = self._first_heap(need, shared_view)
            held = self._heaps[key] = _ShapeHeap(heap, len(self._dropped), exclude)
        else:
            heap = held.heap
            if held.aside_for != exclude:
                for entry in held.aside:
                    heapq.heappush(heap, entry)
                held.aside.clear()
                held.aside_for = exclude
            if held.seen < len(self._dropped):
                version = self._version
                for name in set(self._dropped[held.seen:]):
                    e = self._heap_entry(name, need, shared_view)
                    top = heap[0] if heap else None
                    if top is not None and top[-3] == name and top[-2] != version[name]:
                        # The node just planned on, still on top with its stale entry: one sift, not two.
                        if e is None:
                            heapq.heappop(heap)
                        else:
                            heapq.heapreplace(heap, e)
                    elif e is not None:
                        heapq.heappush(heap, e)
                held.seen = len(self._dropped)
        return self._search(held.heap, need, exclude, held.aside)

    def _search(self, heap: list[HeapEntry], need: Need, exclude: frozenset[str],
                aside: list[HeapEntry]) -> tuple[HostView, list[Candidate], float | None] | None:
        """Pop until a searched node outside ``exclude`` is on top; the valid
        entries of excluded nodes go to ``aside`` unchanged."""
        bounded = self._bounded
        version, views = self._version, self._views
        heappop = heapq.heappop
        while heap:
            top = heap[0]
            name, ver, found = top[-3], top[-2], top[-1]
            if ver != version.get(name, 0):
                heappop(heap)  # the node changed since; a newer entry exists if it is still feasible
                continue
            if name in exclude:
                aside.append(heappop(heap))
                continue
            view = views[name]
            if found is not None:
                score, victims = found
                return view, victims, score
            found = bounded.best_on_node(need, view, None)  # the heap keeps what it finds
            if found is None:
                heappop(heap)  # left out until the node changes
                continue
            entry = bounded.rank(found[0], found[1], name) + (name, ver, found)
            n = len(heap)
            if n == 1 or (entry <= heap[1] and (n == 2 or entry <= heap[2])):
                # No entry is below the rank (each is above the top's children), so the node is the
                # answer; its floor entry may stay, the rank would be popped with it when it changes.
                return view, found[1], found[0]
            heapq.heapreplace(heap, entry)  # the rank replaces the floor in one sift
        return None


__all__ = ["RankedNodes"]
