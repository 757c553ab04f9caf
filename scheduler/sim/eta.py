"""``--eta-sample K``: how good the start-time forecasts are, measured in a run.

K jobs of the workload are drawn with a seeded generator; at each one's
submission instant (after that instant's arrivals and events, before the
policy decides; with ``round_seconds``, at the first round at or after it, as
the policy sees the job no sooner) the run's snapshot is frozen and ``scheduler.sim.forecast``
forecasts the job's start, with the same policy and only what was known then:
the jobs submitted so far, their progress, and the run times of the jobs
finished so far (``RuntimeEstimator``; never a job's true duration). The run
then continues as if nothing had happened, and the forecast is compared with
the job's actual first start.

Each forecast is the median start over ``draws`` runs (``DEFAULT_DRAWS``), each with its own
draws of the run times (``scheduler.sim.forecast``, "Several futures").

With ``progress_share`` > 0 (``--progress-reports``), that share of the jobs report their progress
as jobs using ``gpusched.job`` do live: a forecast takes a reporting job's remaining time, once its
attempt has a measured rate, from its reports instead of the history, misread by
``progress_noise`` (``--progress-noise``; ``scheduler.sim.progress_reports``).

A forecast is *within* when ``|forecast - actual| <= max(0.25 * wait, 300 s)``
with ``wait = actual - submit``; ``within_25pct_waited`` counts only samples
that waited at least 600 s (None when none did). A forecast past the
forecast's horizon (None) is never within; its error is taken against
``submit + horizon`` (a lower bound).
"""

from __future__ import annotations

import csv
import random
from collections.abc import Sequence
from dataclasses import dataclass

from scheduler.core.metrics import percentile
from scheduler.core.model import JobClass, NodeCapacity
from scheduler.core.policy import Policy
from scheduler.core.runtime_estimate import FinishedRun, RuntimeEstimate, RuntimeEstimator, WithReported, owner_of
from scheduler.sim.engine import Simulator
from scheduler.sim.forecast import ForecastLimits, forecast_starts, freeze
from scheduler.sim.job_state import SimJobState
from scheduler.sim.progress_reports import check_noise, check_share, measured_remainders
from scheduler.sim.records import SimConfig, SimResult
from scheduler.sim.workloads.types import SimJob

#: Runs per forecast. Measured on four seeds of a Philly window and of the default synthetic
#: workload (docs/results.md): 7 against 1 took the Philly jobs that waited from 0.51 to 0.61 within
#: 25 % on average and left the synthetic ones unchanged.
DEFAULT_DRAWS = 7
WITHIN_FRACTION = 0.25
WITHIN_FLOOR = 300.0
WAITED = 600.0
CSV_COLUMNS = ("policy", "job_id", "job_class", "submit_time", "forecast_start", "actual_start")


@dataclass(frozen=True, slots=True)
class EtaOptions:
    """What ``--eta-sample`` asks: ``sample`` forecasts at seeded submissions (``seed``), each the
    median of ``draws`` runs, with ``progress_share`` of the jobs reporting their progress at rates
    misread by ``progress_noise`` (``scheduler.sim.progress_reports``)."""

    sample: int
    seed: int = 0
    draws: int = DEFAULT_DRAWS
    progress_share: float = 0.0
    progress_noise: float = 0.0


@dataclass(frozen=True, slots=True)
class EtaSample:
    """One forecast: the job, when it was submitted, forecast and actual start."""

    job_id: str
    job_class: JobClass
    submit_time: float
    forecast_start: float | None
    actual_start: float | None = None


def choose_samples(jobs: Sequence[SimJob], k: int, seed: int) -> set[str]:
    """``k`` job ids (all of them when ``k`` >= the number of jobs), drawn with ``seed``."""
    if k < 1:
        raise ValueError(f"--eta-sample must be >= 1, got {k}")
    ids = sorted(j.spec.id for j in jobs)
    return set(ids) if k >= len(ids) else set(random.Random(f"eta-{seed}").sample(ids, k))


class SamplingSimulator(Simulator):
    """A simulator that forecasts the chosen jobs' starts at their submission."""

    def __init__(self, policy: Policy, nodes: Sequence[NodeCapacity], jobs: Sequence[SimJob],
                 config: SimConfig, samples: set[str], limits: ForecastLimits = ForecastLimits(),
                 estimator: RuntimeEstimator | None = None, draws: int = DEFAULT_DRAWS,
                 progress_share: float = 0.0, progress_noise: float = 0.0) -> None:
        super().__init__(policy, nodes, jobs, config)
        self.limits = limits
        self.draws = draws
        self.progress_share = check_share(progress_share)
        self.progress_noise = check_noise(progress_noise)
        self.estimator = estimator if estimator is not None else RuntimeEstimator()
        # (submit time, job id) of the samples, latest first: each is forecast at the first decision
        # instant at or after its submission (the same instant unless the policy decides in rounds).
        self._due = sorted(((j.spec.submit_time, j.spec.id) for j in jobs if j.spec.id in samples), reverse=True)
        self.forecasts: dict[str, EtaSample] = {}

    def _complete(self, job: SimJobState, t: float) -> None:
        super()._complete(job, t)
        spec = job.spec
        self.estimator.add(FinishedRun(owner_of(spec), spec.job_class, spec.num_gpus, job.duration))

    def _decide(self, t: float) -> None:
        due = []
        while self._due and self._due[-1][0] <= t:
            due.append(self._due.pop()[1])
        if due:
            self._forecast(due, t)
        super()._decide(t)

    def _forecast(self, ids: list[str], t: float) -> None:
        if self._usage is not None:
            self.snapshot.tenants = self._usage.state(t)
        snap = freeze(self.snapshot)
        estimator: RuntimeEstimate = self.estimator
        if self.progress_share:
            reported = measured_remainders(snap.running, t, self.progress_share, self._duration_of,
                                           self.progress_noise, self._rate_of)
            estimator = WithReported(estimator, reported)
        starts = forecast_starts(self.policy, snap, t, estimator, targets=ids, limits=self.limits,
                                 resume_overhead=self.config.resume_overhead, draws=self.draws)
        for jid in ids:
            spec = self._by_id[jid].spec
            self.forecasts[jid] = EtaSample(jid, spec.job_class, spec.submit_time, starts.get(jid))

    def _duration_of(self, job_id: str) -> float:
        """A job's true total work: what its own progress reports measure, never the history."""
        return self._by_id[job_id].duration

    def _rate_of(self, job_id: str) -> float:
        """Seconds of work per second of the job's running attempt (a reconfigured job's differs from 1)."""
        running = self._by_id[job_id].running
        rate = getattr(running, "_rate", 1.0) if running is not None else 1.0
        return rate if rate > 0 else 1.0


def sample_run(policy: Policy, nodes: Sequence[NodeCapacity], jobs: Sequence[SimJob], config: SimConfig,
               k: int, seed: int, limits: ForecastLimits = ForecastLimits(),
               estimator: RuntimeEstimator | None = None, draws: int = DEFAULT_DRAWS,
               progress_share: float = 0.0, progress_noise: float = 0.0) -> tuple[SimResult, list[EtaSample]]:
    """Simulate with forecasts at ``k`` seeded submissions, each the median of ``draws`` runs; the
    run's result and the samples (with their actual starts), in submission order. ``estimator``
    (default: a fresh ``RuntimeEstimator``) learns every completion of the run; ``progress_share``
    of the jobs report their progress, at rates misread by ``progress_noise`` (module docstring)."""
    sim = SamplingSimulator(policy, nodes, jobs, config, choose_samples(jobs, k, seed), limits, estimator, draws,
                            progress_share, progress_noise)
    result = sim.run()
    firsts = {o.job_id: o.first_start for o in result.outcomes}
    samples = [
        EtaSample(s.job_id, s.job_class, s.submit_time, s.forecast_start, firsts.get(s.job_id))
        for s in sim.forecasts.values()
    ]
    samples.sort(key=lambda s: (s.submit_time, s.job_id))
    return result, samples


def _error(s: EtaSample, horizon: float) -> float:
    assert s.actual_start is not None
    forecast = s.forecast_start if s.forecast_start is not None else s.submit_time + horizon
    return abs(forecast - s.actual_start)


def _within(s: EtaSample, horizon: float) -> bool:
    assert s.actual_start is not None
    if s.forecast_start is None:
        return False
    wait = s.actual_start - s.submit_time
    return _error(s, horizon) <= max(WITHIN_FRACTION * wait, WITHIN_FLOOR)


def eta_summary(samples: Sequence[EtaSample], horizon: float = ForecastLimits().horizon) -> dict:
    """The ``eta`` object of the JSON result (see the module docstring)."""
    done = [s for s in samples if s.actual_start is not None]
    errors = sorted(_error(s, horizon) for s in done)
    waited = [s for s in done if s.actual_start - s.submit_time >= WAITED]
    return {
        "samples": len(done),
        "abs_error_seconds": {"p50": percentile(errors, 50), "p90": percentile(errors, 90)},
        "within_25pct": sum(_within(s, horizon) for s in done) / len(done) if done else None,
        "within_25pct_waited": sum(_within(s, horizon) for s in waited) / len(waited) if waited else None,
    }


def waited_count(samples: Sequence[EtaSample]) -> int:
    """Samples that waited at least 600 s (the denominator of ``within_25pct_waited``)."""
    return sum(1 for s in samples if s.actual_start is not None and s.actual_start - s.submit_time >= WAITED)


def write_eta_csv(path: str, runs: Sequence) -> None:
    """One row per forecast of every run that sampled forecasts."""
    with open(path, "w", newline="", encoding="utf-8") as f:
        out = csv.writer(f)
        out.writerow(CSV_COLUMNS)
        for run in runs:
            for s in run.eta_samples or ():
                out.writerow((run.policy, s.job_id, s.job_class.value, s.submit_time,
                              "" if s.forecast_start is None else s.forecast_start,
                              "" if s.actual_start is None else s.actual_start))
