"""TE priority plus preemption of BE jobs: the shared machinery and the two
baseline victim choices (``preempt-random``, ``preempt-newest``)."""

from __future__ import annotations

from scheduler.core.decisions import Preempt, Reason
from scheduler.core.model import JobClass, PendingJob, Snapshot
from scheduler.core.placement import per_unit
from scheduler.core.policies.base import (
    DEFAULT_RECLAIM_MIN_RUNTIME,
    DEFAULT_STARVATION_THRESHOLD,
    Cycle,
    StarvationGuard,
    check_non_negative,
    gpus_text,
)
from scheduler.core.policies.te_priority import TePriority
from scheduler.core.victim_choosers import NewestChooser, RandomChooser, VictimChooser
from scheduler.core.victim_planner import Planner
from scheduler.core.victims import Candidate, PreemptionPlan, RunningIndex

DEFAULT_TE_TIME_LIMIT = 3600.0
"""Seconds a TE job keeps its privilege in one attempt (or in total work).
TE jobs are short trial-and-error runs (minutes); an hour covers them with a
wide margin while stopping a long job submitted as TE from holding GPUs that
BE jobs cannot reclaim."""

DEFAULT_MAX_PREEMPTIONS = 3
"""How often one job may be preempted. A job's slowdown grows with every
requeue; three bounds it while leaving the victim choice room to work."""


class PreemptivePolicy(TePriority):
    """``te-priority`` plus preemption: a TE job that does not fit preempts BE
    victims chosen by ``self.chooser`` and waits for them to vacate.

    Parameters (keyword only), besides ``starvation_threshold`` and ``explain``:
    ``te_time_limit`` (s, default 3600): a TE job running longer than this in
    its current attempt, or with more work than this in total, is treated as
    BE from then on (it can be a victim; pending, it queues as BE).
    ``max_preemptions`` (default 3): a job preempted this often is never
    preempted again for a TE job (fair-share reclaim counts to its own
    limit, ``base.RECLAIM_MAX_PREEMPTIONS``).

    Reserved nodes (anti-starvation) are avoided for victims as long as the TE
    job can be served elsewhere: preempting there would hand the reserved
    GPUs to a TE job and delay the starving job further.
    """

    name = "preemptive"

    def __init__(
        self,
        *,
        te_time_limit: float = DEFAULT_TE_TIME_LIMIT,
        max_preemptions: int = DEFAULT_MAX_PREEMPTIONS,
        starvation_threshold: float | None = DEFAULT_STARVATION_THRESHOLD,
        explain: bool = True,
        reclaim_min_runtime: float | None = DEFAULT_RECLAIM_MIN_RUNTIME,
    ) -> None:
        super().__init__(starvation_threshold=starvation_threshold, explain=explain,
                         reclaim_min_runtime=reclaim_min_runtime)
        check_non_negative("te_time_limit", te_time_limit)
        if not isinstance(max_preemptions, int) or isinstance(max_preemptions, bool) or max_preemptions < 0:
            raise ValueError(f"max_preemptions must be an integer >= 0, got {max_preemptions!r}")
        self.te_time_limit = float(te_time_limit)
        self.max_preemptions = max_preemptions

    def make_chooser(self) -> VictimChooser:
        raise NotImplementedError

    # --- queues: TE jobs past their time limit queue as BE --------------------

    def te_queue(self, snapshot: Snapshot) -> list[PendingJob]:
        limit = self.te_time_limit
        if snapshot.pending_te is not None:
            return [p for p in snapshot.pending_te if p.progress <= limit]
        te = JobClass.TE
        return [p for p in snapshot.pending if p.spec.job_class is te and p.progress <= limit]

    # --- TE jobs that do not fit ----------------------------------------------

    def _get_planner(self, cyc: Cycle) -> Planner:
        if cyc.planner is None:
            snap = cyc.snapshot
            index = RunningIndex(snap.running, cyc.now, self.te_time_limit, self.max_preemptions)
            waiting = {p.spec.id for p in cyc.te_queue if p.hold_reason is None}
            cyc.planner = Planner(cyc.cap, index, waiting, self.make_chooser())
            cyc.claimants = {w.claimed_by for w in index.vacating}
        return cyc.planner  # type: ignore[return-value]

    def te_no_fit(self, cyc: Cycle, job: PendingJob, guard: StarvationGuard | None) -> None:
        spec = job.spec
        unit = per_unit(spec)  # once per job: the planner needs it three times
        if not cyc.can_ever_fit(job, unit):
            if cyc.explain:
                cyc.pend(job, Reason.RESOURCES, cyc.resources_message(job))
            return
        planner = self._get_planner(cyc)
        shape = (spec.num_gpus, *unit)
        # Capacity only shrinks within a cycle, so a shape that found no plan
        # finds none later, unless the job has resources vacating for it.
        if shape in cyc.no_plan and spec.id not in cyc.claimants:
            plan = None
        else:
            plan = planner.plan(job, cyc.now, guard.avoid if guard is not None else None, unit)
        if plan is None:
            if spec.id not in cyc.claimants:
                cyc.no_plan.add(shape)
            if cyc.explain:
                cyc.pend(
                    job,
                    Reason.RESOURCES,
                    f"{cyc.resources_message(job)}; no preemption can make room (TE jobs are not preempted, "
                    f"nor jobs already preempted {self.max_preemptions} times)",
                )
            return
        planner.commit(job, plan, unit)
        for v in plan.victims:
            cyc.out.append(Preempt(v.id, spec.id, Reason.PREEMPTED_FOR_TE, self.victim_message(spec.id, v, plan)))
        if cyc.explain:
            cyc.pend(job, Reason.WAITING_FOR_PREEMPTION, self.waiting_message(plan), plan.until)

    # --- messages -------------------------------------------------------------

    def victim_message(self, te_id: str, v: Candidate, plan: PreemptionPlan) -> str:
        if len(v.parts) == 1:
            ((node, (gpus, _, _)),) = v.parts.items()
            here = f"{gpus} GPU{'s' if gpus != 1 else ''} on {node}"  # ``gpus_text`` written out
        else:
            here = ", ".join(f"{gpus_text(v.parts[n][0])} on {n}" for n in sorted(v.parts))
        grace = _GRACE_TEXT.get(v.grace)
        if grace is None:
            grace = f"{v.grace:g}"
            if len(_GRACE_TEXT) < _TEXT_CACHE_SIZE:
                _GRACE_TEXT[v.grace] = grace
        msg = f"preempted for TE job {te_id}: grace {grace} s, {here}"
        if v.demoted_te:
            msg += f" (TE job past its {self.te_time_limit:g} s TE time limit, treated as BE)"
        if plan.score is not None:
            msg = f"{msg}; victim score {plan.score:.1f}"
        return msg

    @staticmethod
    def waiting_message(plan: PreemptionPlan) -> str:
        """What a TE job waits for; when it is expected to end goes in the Pend's ``expected_at``
        (a countdown in the text would change it, and rewrite the job's row, every cycle)."""
        if len(plan.victims) == 1 and not plan.waits_on and len(plan.parts) == 1:
            # The usual plan, thousands of them in a large cycle: no sets, sorts or joins.
            return f"waiting for preempted job {plan.victims[0].id} to vacate {next(iter(plan.parts))}"
        ids = sorted({v.id for v in plan.victims} | {w.id for w in plan.waits_on})
        where = next(iter(plan.parts)) if len(plan.parts) == 1 else ", ".join(sorted(plan.parts))
        shown = ", ".join(ids[:5]) + (f" and {len(ids) - 5} more" if len(ids) > 5 else "")
        return f"waiting for preempted job{'s' if len(ids) != 1 else ''} {shown} to vacate {where}"


#: Texts of grace periods, which take few distinct values across thousands of preemptions;
#: bounded so that a process running for months keeps a small cache.
_GRACE_TEXT: dict[float, str] = {}
_TEXT_CACHE_SIZE = 4096


class PreemptRandom(PreemptivePolicy):
    """Victims chosen at random among eligible BE jobs (node at random among
    those that can host the TE job, then victims in random order until it
    fits). ``seed`` (default 0) makes it reproducible; the generator is
    re-seeded per decision from (seed, time, TE job id), so the same snapshot
    and time always give the same victims."""

    name = "preempt-random"

    def __init__(self, *, seed: int = 0, **params: object) -> None:
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise ValueError(f"seed must be an integer, got {seed!r}")
        super().__init__(**params)  # type: ignore[arg-type]
        self.seed = seed
        self._chooser = RandomChooser(seed)

    def make_chooser(self) -> VictimChooser:
        return self._chooser


class PreemptNewest(PreemptivePolicy):
    """Victims are the most recently started eligible jobs (the usual
    Kubernetes choice: they lose the least progress if they cannot
    checkpoint). Node: the one needing the fewest victims, then the one whose
    victims started latest, then by name."""

    name = "preempt-newest"

    def make_chooser(self) -> VictimChooser:
        return NewestChooser()
