"""FitGpp: selective preemption for low-latency TE jobs (Yabuuchi et al.,
OpML 2019). The victim set is the one of minimum score; docs/policies.md
explains the formula, each term and the defaults.

For a TE job needing ``G`` GPUs and a candidate victim set ``V`` on node ``n``
(where free GPUs plus GPUs already vacating for the job give ``A``)::

    score(V) = wait_weight   * T    T = max(grace of V, remaining grace of jobs vacating on n)
             + victim_weight * |V|
             + excess_weight * X    X = sum over V of GPUs - max(0, G - A)
             + loss_weight   * L    L = sum over V of GPUs * (grace + resume_overhead)
             + repeat_weight * R    R = sum over V of earlier preemptions

``T`` is the TE job's re-scheduling interval (aim 1); ``|V|`` and ``X`` are
fit (aim 2: few preemptions, freed resources that match the need); ``L`` and
``R`` the preemption-incurred loss (aim 3): GPU-seconds lost and jobs hit
again and again. Every term is in "seconds of TE wait": the weights convert.
The defaults (excess and loss weights 0) come from a measured sweep, see
docs/policies.md: penalties that grow with victim size steer the choice to
small victims, which raised total preemptions and the BE median slowdown.
"""

from __future__ import annotations

from typing import Sequence

from scheduler.core.policies.base import check_non_negative
from scheduler.core.policies.preemptive import PreemptivePolicy
from scheduler.core.victim_choosers import NodeMemo, VictimChooser, prefix_cover
from scheduler.core.victims import Candidate, Need, HostView

DEFAULT_WEIGHTS = {
    "wait_weight": 1.0,
    "victim_weight": 60.0,
    "excess_weight": 0.0,
    "loss_weight": 0.0,
    "repeat_weight": 30.0,
}
DEFAULT_RESUME_OVERHEAD = 30.0
DEFAULT_SUBSET_LIMIT = 12

_EPS = 1e-9


class FitGppChooser:
    """Minimum-score victim set. Per node: every minimal covering subset when
    the node has at most ``subset_limit`` candidates (branch and bound; the
    score only grows as victims are added), else a greedy by single-victim
    cost. Across nodes: the lowest (score, victim ids, node)."""

    def __init__(
        self,
        weights: dict[str, float],
        resume_overhead: float,
        subset_limit: int,
    ) -> None:
        self.ww = weights["wait_weight"]
        self.wv = weights["victim_weight"]
        self.we = weights["excess_weight"]
        self.wl = weights["loss_weight"]
        self.wr = weights["repeat_weight"]
        self.r = resume_overhead
        self.subset_limit = subset_limit

    # --- the formula -----------------------------------------------------------

    def own(self, v: Candidate) -> float:
        """The victim's additive share: count, lost GPU-seconds, repeats."""
        return self.wv + self.wl * v.gpus * (v.grace + self.r) + self.wr * v.preemptions

    def score(self, need: Need, view: HostView, victims: Sequence[Candidate]) -> float:
        """The score of ``victims`` on ``view`` (the formula in the module doc)."""
        deficit = max(0, need.gpus - view.g)
        wait = max([view.vac_end - need.now] + [v.grace for v in victims])
        excess = max(0, sum(v.gpus for v in victims) - deficit)
        return self.ww * wait + self.we * excess + sum(self.own(v) for v in sorted(victims, key=lambda v: v.id))

    # --- choosing ----------------------------------------------------------------

    def single(
        self, need: Need, views: Sequence[HostView], memo: NodeMemo
    ) -> tuple[HostView, list[Candidate], float | None] | None:
        """Nodes are visited in order of a lower bound on their best score
        (one victim at least: the smallest own cost, and a wait of at least the
        shortest grace period there), and the visit stops once the bound
        exceeds the best score found: most nodes are never searched. The
        result is the node of least ``rank`` among all of ``views``."""
        now = need.now
        order = sorted((self.bound(view, now), view.name, view) for view in views)
        best: tuple[float, tuple[str, ...], str] | None = None
        best_pick: tuple[HostView, list[Candidate], float | None] | None = None
        for bound, _, view in order:
            if best is not None and bound > best[0] + _EPS:
                break
            found = self.best_on_node(need, view, memo)
            if found is None:
                continue
            score, victims = found
            if best is not None and score > best[0] + _EPS:
                continue
            k = self.rank(score, victims, view.name)
            if best is None or k < best:
                best, best_pick = k, (view, victims, score)
        return best_pick

    def bound(self, view: HostView, now: float) -> float:
        """A lower bound on the score of any victim set on ``view`` (which has
        candidates); a function of the node and ``now`` only, not of the job."""
        return self._bound_and_least_id(view, now)[0]

    def floor(self, view: HostView, now: float) -> tuple[float, str, tuple[str, ...], str]:
        """A lower bound on every ``rank`` of ``view`` (which has candidates),
        for any TE job: ``(bound rounded to 1e-9, least candidate id, (), name)``.

        Valid because every weight is >= 0: a victim set's score adds terms
        that are each at least their part of ``bound`` (float addition and
        multiplication by a non-negative number never decrease), rounding to
        1e-9 keeps the order, and the victim ids of a rank are sorted, so they
        start with an id no less than the least candidate id (and ``()`` is
        below any other ids that follow). The id breaks the ties of the many
        nodes whose bounds are equal, so few of them need a search."""
        bound, least_id = self._bound_and_least_id(view, now)
        return (round(bound, 9), least_id, (), view.name)

    def _bound_and_least_id(self, view: HostView, now: float) -> tuple[float, str]:
        """``bound`` (the shortest grace, or the wait for vacating jobs if
        longer, plus the least ``own``) and the least candidate id, in one
        pass over the candidates."""
        wv, wl, wr, r = self.wv, self.wl, self.wr, self.r
        cands = view.cands
        first = cands[0]
        shortest = first.grace
        least_own = wv + wl * first.gpus * (first.grace + r) + wr * first.preemptions
        least_id = first.id
        for v in cands:
            if v.grace < shortest:
                shortest = v.grace
            own = wv + wl * v.gpus * (v.grace + r) + wr * v.preemptions  # ``own(v)`` written out
            if own < least_own:
                least_own = own
            if v.id < least_id:
                least_id = v.id
        base = view.vac_end - now
        return self.ww * (shortest if shortest > base else base) + least_own, least_id

    def best_on_node(self, need: Need, view: HostView, memo: NodeMemo | None) -> tuple[float, list[Candidate]] | None:
        """The node's minimum-score victim set (cached in ``memo`` unless None)."""
        if memo is None:
            return self._best_on_node(need, view)
        return memo.get(view, ("fitgpp", need.shape), lambda: self._best_on_node(need, view))  # type: ignore[return-value]

    @staticmethod
    def rank(score: float, victims: Sequence[Candidate], name: str) -> tuple[float, str, tuple[str, ...], str]:
        """Across nodes the least rank wins: score (to 1e-9), victim ids (sorted), node. The ids are
        given as the first and a tuple of the rest, which orders as the tuple of all of them does:
        ranks are compared many times (the planner keeps them in a heap), and a string compares
        faster than a tuple holding it."""
        rest = () if len(victims) == 1 else tuple(v.id for v in victims[1:])
        return (round(score, 9), victims[0].id, rest, name)

    def order(self, need: Need, cands: list[Candidate], nodes: frozenset[str]) -> list[Candidate]:
        """Multi-node greedy: cheapest victims per GPU freed where the job goes;
        GPUs freed elsewhere count as excess."""

        def key(v: Candidate) -> tuple[float, str]:
            useful = sum(g for n, (g, _, _) in v.parts.items() if n in nodes)
            cost = self.ww * v.grace + self.own(v) + self.we * (v.gpus - useful)
            return (cost / max(useful, 1), v.id)

        return sorted(cands, key=key)

    def _best_on_node(self, need: Need, view: HostView) -> tuple[float, list[Candidate]] | None:
        """The minimum-score victim set on one node (victims sorted by id)."""
        if not view.cands:
            return None
        single = self._best_singleton(need, view)
        if single is not None:
            return single
        # Each candidate's ``own`` once, for the order and the search (ids are unique, so the
        # sort never compares candidates themselves).
        ww = self.ww
        keyed = []
        for v in view.cands:
            o = self.own(v)
            keyed.append((ww * v.grace + o, v.id, o, v))
        keyed.sort()
        cands = [k[3] for k in keyed]
        greedy = prefix_cover(need, view, cands)
        if greedy is None:
            return None
        greedy.sort(key=lambda v: v.id)
        greedy_score = self.score(need, view, greedy)
        if len(cands) > self.subset_limit:
            return greedy_score, greedy
        found = self._search(need, view, cands, greedy_score, [k[2] for k in keyed])
        if found is None or (round(greedy_score, 9), [v.id for v in greedy]) <= (
            round(found[0], 9),
            [v.id for v in found[1]],
        ):
            return greedy_score, greedy
        return found

    def _best_singleton(self, need: Need, view: HostView) -> tuple[float, list[Candidate]] | None:
        """When every candidate alone frees enough (the usual case for a small
        TE job on a full node), the minimal covering sets are the single
        victims: the best is the cheapest of them, no search needed. None when
        some candidate does not cover alone."""
        name = view.name
        g0, c0, m0 = view.g, view.c, view.m
        units = need.units
        deficit = max(0, need.gpus - g0)
        base_wait = view.vac_end - need.now
        ww, we, wv, wl, wr, r = self.ww, self.we, self.wv, self.wl, self.wr, self.r
        plain = not (need.cpg or need.mpg)
        best: tuple[float, str] | None = None
        best_v = None
        best_s = 0.0
        for v in view.cands:
            vg, vc, vm = v.parts[name]
            if (vg < deficit) if plain else (units(g0 + vg, c0 + vc, m0 + vm) < need.gpus):
                return None
            grace = v.grace
            excess = v.gpus - deficit
            # ``score`` of the one-victim set, term by term in the same order
            # (so the same float), with ``own`` written out: this loop runs
            # for every node searched.
            s = (
                ww * (grace if grace > base_wait else base_wait)
                + we * (excess if excess > 0 else 0)
                + (wv + wl * v.gpus * (grace + r) + wr * v.preemptions)
            )
            k = (round(s, 9), v.id)
            if best is None or k < best:
                best, best_v, best_s = k, v, s
        assert best_v is not None
        return best_s, [best_v]

    def _search(
        self, need: Need, view: HostView, cands: list[Candidate], bound: float, own: list[float]
    ) -> tuple[float, list[Candidate]] | None:
        """Branch and bound over subsets in candidate order; a covering subset
        is never extended (a superset scores no better). ``own[i]`` is
        ``own(cands[i])``."""
        name = view.name
        n = len(cands)
        contrib = [v.parts[name] for v in cands]
        min_own = min(own)
        # Suffix sums: can the remaining candidates still cover?
        sg = [0] * (n + 1)
        sc = [0.0] * (n + 1)
        sm = [0.0] * (n + 1)
        for i in range(n - 1, -1, -1):
            g, c, m = contrib[i]
            sg[i], sc[i], sm[i] = sg[i + 1] + g, sc[i + 1] + c, sm[i + 1] + m
        deficit = max(0, need.gpus - view.g)
        ww, we = self.ww, self.we
        best_score = bound
        best_ids: tuple[str, ...] | None = None
        best_set: list[Candidate] | None = None
        chosen: list[Candidate] = []

        def rec(i: int, g: int, c: float, m: float, wait: float, tg: int, acc: float) -> None:
            nonlocal best_score, best_ids, best_set
            for j in range(i, n):
                v = cands[j]
                vg, vc, vm = contrib[j]
                g2, c2, m2 = g + vg, c + vc, m + vm
                wait2 = wait if wait >= v.grace else v.grace
                tg2 = tg + v.gpus
                acc2 = acc + own[j]
                excess = tg2 - deficit
                s = ww * wait2 + we * (excess if excess > 0 else 0) + acc2
                if s > best_score + _EPS:
                    continue
                chosen.append(v)
                if need.units(g2, c2, m2) >= need.gpus:
                    ids = tuple(sorted(x.id for x in chosen))
                    if s < best_score - _EPS or best_ids is None or ids < best_ids:
                        best_score, best_ids, best_set = s, ids, list(chosen)
                elif s + min_own <= best_score + _EPS and need.units(
                    g2 + sg[j + 1], c2 + sc[j + 1], m2 + sm[j + 1]
                ) >= need.gpus:
                    rec(j + 1, g2, c2, m2, wait2, tg2, acc2)
                chosen.pop()

        rec(0, view.g, view.c, view.m, view.vac_end - need.now, 0, 0.0)
        del rec  # it refers to itself: a reference cycle (with its candidates) left for the collector otherwise
        if best_set is None:
            return None
        best_set.sort(key=lambda v: v.id)
        return self.score(need, view, best_set), best_set


class FitGpp(PreemptivePolicy):
    """The paper's method: TE priority plus preemption of the BE victim set of
    minimum score (module doc; docs/policies.md explains the defaults).

    Parameters (keyword only), besides those of every preempting policy, all
    in "seconds of TE wait" per unit: ``wait_weight`` (1.0 per second the TE
    job waits), ``victim_weight`` (60 per victim), ``excess_weight`` (0 per GPU
    freed beyond the need), ``loss_weight`` (0 per GPU-second lost),
    ``repeat_weight`` (30 per earlier preemption of a victim);
    ``resume_overhead`` (30 s charged to a victim when it restarts; the
    simulator passes its own), ``subset_limit`` (12: above this many
    candidates on a node, a greedy replaces the exhaustive search).
    """

    name = "fitgpp"

    def __init__(
        self,
        *,
        wait_weight: float = DEFAULT_WEIGHTS["wait_weight"],
        victim_weight: float = DEFAULT_WEIGHTS["victim_weight"],
        excess_weight: float = DEFAULT_WEIGHTS["excess_weight"],
        loss_weight: float = DEFAULT_WEIGHTS["loss_weight"],
        repeat_weight: float = DEFAULT_WEIGHTS["repeat_weight"],
        resume_overhead: float = DEFAULT_RESUME_OVERHEAD,
        subset_limit: int = DEFAULT_SUBSET_LIMIT,
        **params: object,
    ) -> None:
        super().__init__(**params)  # type: ignore[arg-type]
        weights = {
            "wait_weight": wait_weight,
            "victim_weight": victim_weight,
            "excess_weight": excess_weight,
            "loss_weight": loss_weight,
            "repeat_weight": repeat_weight,
        }
        for pname, value in weights.items():
            check_non_negative(pname, value)
        check_non_negative("resume_overhead", resume_overhead)
        if not isinstance(subset_limit, int) or isinstance(subset_limit, bool) or subset_limit < 0:
            raise ValueError(f"subset_limit must be an integer >= 0, got {subset_limit!r}")
        self.weights = {k: float(v) for k, v in weights.items()}
        self.resume_overhead = float(resume_overhead)
        self.subset_limit = subset_limit
        self._chooser = FitGppChooser(self.weights, self.resume_overhead, subset_limit)

    def make_chooser(self) -> VictimChooser:
        return self._chooser
