"""FitGpp: selective preemption for low-latency TE jobs (Yabuuchi et al.,
OpML 2019). The victim set is the one of minimum score; see docs/policies.md
for the formula and why each term is there.

For a TE job needing ``G`` GPUs and a candidate victim set ``V`` on node ``n``
(where free GPUs plus GPUs already vacating for the job give ``A``)::

    score(V) = wait_weight   * T          T = max(grace of V, remaining grace of jobs vacating on n)
             + loss_weight   * L          L = sum over V of gpus * (grace + resume_overhead)
             + victim_weight * |V|
             + excess_weight * X          X = sum over V of gpus - max(0, G - A)
             + repeat_weight * R          R = sum over V of earlier preemptions

``T`` is the TE job's re-scheduling interval (aim 1), ``|V|`` and ``X`` measure
fit (aim 2: few preemptions, freed resources that match the need), ``L`` and
``R`` the preemption-incurred loss (aim 3). Every term is in "seconds of TE
wait": the weights convert.
"""

from __future__ import annotations

from typing import Sequence

from scheduler.core.policies.base import check_non_negative
from scheduler.core.policies.preemptive import PreemptivePolicy
from scheduler.core.policy import register
from scheduler.core.victims import Candidate, Need, NodeMemo, NodeView, VictimChooser, prefix_cover

DEFAULT_WEIGHTS = {
    "wait_weight": 1.0,
    "loss_weight": 0.05,
    "victim_weight": 60.0,
    "excess_weight": 30.0,
    "repeat_weight": 120.0,
}
DEFAULT_RESUME_OVERHEAD = 30.0
DEFAULT_SUBSET_LIMIT = 12


class FitGppChooser:
    """Minimum-score victim set. Per node: every minimal covering subset when
    the node has at most ``subset_limit`` candidates (branch and bound; the
    score only grows as victims are added), else a greedy by single-victim
    score. Across nodes: the lowest (score, victim ids, node)."""

    def __init__(
        self,
        wait_weight: float,
        loss_weight: float,
        victim_weight: float,
        excess_weight: float,
        repeat_weight: float,
        resume_overhead: float,
        subset_limit: int,
    ) -> None:
        self.ww = wait_weight
        self.wl = loss_weight
        self.wv = victim_weight
        self.we = excess_weight
        self.wr = repeat_weight
        self.r = resume_overhead
        self.subset_limit = subset_limit

    def score(self, need: Need, view: NodeView, victims: Sequence[Candidate]) -> float:
        """The score of ``victims`` on ``view`` (the formula in the module doc)."""
        deficit = max(0, need.gpus - view.g)
        wait = max([view.vac_end - need.now] + [v.grace for v in victims])
        loss = sum(v.gpus * (v.grace + self.r) for v in victims)
        excess = max(0, sum(v.gpus for v in victims) - deficit)
        repeat = sum(v.preemptions for v in victims)
        return self.ww * wait + self.wl * loss + self.wv * len(victims) + self.we * excess + self.wr * repeat

    def _single_cost(self, v: Candidate) -> float:
        """A victim's own share of the score (its wait, loss, count, repeat)."""
        return self.ww * v.grace + self.wl * v.gpus * (v.grace + self.r) + self.wv + self.wr * v.preemptions

    def single(
        self, need: Need, views: Sequence[NodeView], memo: NodeMemo
    ) -> tuple[NodeView, list[Candidate], float | None] | None:
        best: tuple[float, tuple[str, ...], str] | None = None
        best_pick: tuple[NodeView, list[Candidate], float | None] | None = None
        key = ("fitgpp", need.shape)
        for view in views:
            found = memo.get(view, key, lambda view=view: self._best_on_node(need, view))
            if found is None:
                continue
            score, victims = found  # type: ignore[misc]
            k = (round(score, 9), tuple(v.id for v in victims), view.name)
            if best is None or k < best:
                best, best_pick = k, (view, victims, score)
        return best_pick

    def order(self, need: Need, cands: list[Candidate], nodes: frozenset[str]) -> list[Candidate]:
        """Multi-node greedy: cheapest victims per GPU freed where the job goes;
        GPUs freed elsewhere count as excess."""

        def key(v: Candidate) -> tuple[float, str]:
            useful = sum(g for n, (g, _, _) in v.parts.items() if n in nodes)
            cost = self._single_cost(v) + self.we * (v.gpus - useful)
            return (cost / max(useful, 1), v.id)

        return sorted(cands, key=key)

    def _best_on_node(self, need: Need, view: NodeView) -> tuple[float, list[Candidate]] | None:
        """The minimum-score victim set on one node (victims sorted by id)."""
        if not view.cands:
            return None
        single = self._best_singleton(need, view)
        if single is not None:
            return single
        cands = sorted(view.cands, key=lambda v: (self._single_cost(v), v.id))
        greedy = prefix_cover(need, view, cands)
        if greedy is None:
            return None
        greedy.sort(key=lambda v: v.id)
        greedy_score = self.score(need, view, greedy)
        if len(cands) > self.subset_limit:
            return greedy_score, greedy
        found = self._search(need, view, cands, greedy_score)
        if found is None or (round(greedy_score, 9), [v.id for v in greedy]) <= (round(found[0], 9), [v.id for v in found[1]]):
            return greedy_score, greedy
        return found

    def _best_singleton(self, need: Need, view: NodeView) -> tuple[float, list[Candidate]] | None:
        """When every candidate alone frees enough (the usual case for a small
        TE job on a full node), the minimal covering sets are the single
        victims: the best is the cheapest of them, no search needed. None when
        some candidate does not cover alone."""
        name = view.name
        g0, c0, m0 = view.g, view.c, view.m
        units = need.units
        deficit = max(0, need.gpus - g0)
        base_wait = view.vac_end - need.now
        ww, wl, wv, we, wr, r = self.ww, self.wl, self.wv, self.we, self.wr, self.r
        best: tuple[float, str] | None = None
        best_v = None
        plain = not (need.cpg or need.mpg)
        for v in view.cands:
            vg, vc, vm = v.parts[name]
            if (vg < deficit) if plain else (units(g0 + vg, c0 + vc, m0 + vm) < need.gpus):
                return None
            grace = v.grace
            excess = v.gpus - deficit
            s = (
                ww * (grace if grace > base_wait else base_wait)
                + wl * v.gpus * (grace + r)
                + wv
                + we * (excess if excess > 0 else 0)
                + wr * v.preemptions
            )
            k = (round(s, 9), v.id)
            if best is None or k < best:
                best, best_v = k, v
        assert best_v is not None
        return self.score(need, view, [best_v]), [best_v]

    def _search(
        self, need: Need, view: NodeView, cands: list[Candidate], bound: float
    ) -> tuple[float, list[Candidate]] | None:
        """Branch and bound over subsets in candidate order; a covering subset
        is never extended (a superset scores no better)."""
        name = view.name
        n = len(cands)
        contrib = [v.parts[name] for v in cands]
        # Suffix sums: can the remaining candidates still cover?
        sg = [0] * (n + 1)
        sc = [0.0] * (n + 1)
        sm = [0.0] * (n + 1)
        for i in range(n - 1, -1, -1):
            g, c, m = contrib[i]
            sg[i], sc[i], sm[i] = sg[i + 1] + g, sc[i + 1] + c, sm[i + 1] + m
        deficit = max(0, need.gpus - view.g)
        base_wait = view.vac_end - need.now
        ww, wl, wv, we, wr, r = self.ww, self.wl, self.wv, self.we, self.wr, self.r
        best_score = bound
        best_ids: tuple[str, ...] | None = None
        best_set: list[Candidate] | None = None
        chosen: list[Candidate] = []
        eps = 1e-9

        def rec(i: int, g: int, c: float, m: float, wait: float, loss: float, tg: int, rep: int) -> None:
            nonlocal best_score, best_ids, best_set
            for j in range(i, n):
                v = cands[j]
                vg, vc, vm = contrib[j]
                g2, c2, m2 = g + vg, c + vc, m + vm
                wait2 = wait if wait >= v.grace else v.grace
                loss2 = loss + v.gpus * (v.grace + r)
                tg2 = tg + v.gpus
                rep2 = rep + v.preemptions
                cnt = len(chosen) + 1
                excess = tg2 - deficit
                s = ww * wait2 + wl * loss2 + wv * cnt + we * (excess if excess > 0 else 0) + wr * rep2
                if s > best_score + eps:
                    continue
                chosen.append(v)
                if need.units(g2, c2, m2) >= need.gpus:
                    ids = tuple(sorted(x.id for x in chosen))
                    if s < best_score - eps or best_ids is None or ids < best_ids:
                        best_score, best_ids, best_set = s, ids, list(chosen)
                elif s + wv <= best_score + eps and need.units(g2 + sg[j + 1], c2 + sc[j + 1], m2 + sm[j + 1]) >= need.gpus:
                    rec(j + 1, g2, c2, m2, wait2, loss2, tg2, rep2)
                chosen.pop()

        rec(0, view.g, view.c, view.m, base_wait, 0.0, 0, 0)
        if best_set is None:
            return None
        best_set.sort(key=lambda v: v.id)
        return best_score, best_set


@register("fitgpp")
class FitGpp(PreemptivePolicy):
    """The paper's method: TE priority plus preemption of the BE victim set of
    minimum score (module doc; docs/policies.md explains the defaults).

    Parameters (keyword only), besides those of every preempting policy:
    ``wait_weight`` (1.0 per second of TE wait), ``loss_weight`` (0.05 per
    GPU-second lost), ``victim_weight`` (60 per victim), ``excess_weight``
    (30 per GPU freed beyond the need), ``repeat_weight`` (120 per earlier
    preemption of a victim), ``resume_overhead`` (30 s charged to a victim
    when it restarts), ``subset_limit`` (12: above this many candidates on a
    node, a greedy replaces the exhaustive search).
    """

    name = "fitgpp"

    def __init__(
        self,
        *,
        wait_weight: float = DEFAULT_WEIGHTS["wait_weight"],
        loss_weight: float = DEFAULT_WEIGHTS["loss_weight"],
        victim_weight: float = DEFAULT_WEIGHTS["victim_weight"],
        excess_weight: float = DEFAULT_WEIGHTS["excess_weight"],
        repeat_weight: float = DEFAULT_WEIGHTS["repeat_weight"],
        resume_overhead: float = DEFAULT_RESUME_OVERHEAD,
        subset_limit: int = DEFAULT_SUBSET_LIMIT,
        **params: object,
    ) -> None:
        super().__init__(**params)  # type: ignore[arg-type]
        for pname, value in (
            ("wait_weight", wait_weight),
            ("loss_weight", loss_weight),
            ("victim_weight", victim_weight),
            ("excess_weight", excess_weight),
            ("repeat_weight", repeat_weight),
            ("resume_overhead", resume_overhead),
        ):
            check_non_negative(pname, value)
        if not isinstance(subset_limit, int) or isinstance(subset_limit, bool) or subset_limit < 0:
            raise ValueError(f"subset_limit must be an integer >= 0, got {subset_limit!r}")
        self.weights = {
            "wait_weight": float(wait_weight),
            "loss_weight": float(loss_weight),
            "victim_weight": float(victim_weight),
            "excess_weight": float(excess_weight),
            "repeat_weight": float(repeat_weight),
        }
        self.resume_overhead = float(resume_overhead)
        self.subset_limit = subset_limit
        self._chooser = FitGppChooser(
            float(wait_weight),
            float(loss_weight),
            float(victim_weight),
            float(excess_weight),
            float(repeat_weight),
            float(resume_overhead),
            subset_limit,
        )

    def make_chooser(self) -> VictimChooser:
        return self._chooser
