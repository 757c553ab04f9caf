"""Jobs that report their own progress, as the simulator's forecasts see them.

On the live cluster a running job that reports its steps and total steps
(``gpusched.job``, docs/jobs.md) is not estimated from history: a forecast
takes its remaining time from its own reports (``jobprogress``, through
``scheduler.runtime_estimate.WithReported``). ``--progress-reports SHARE``
gives the simulator's sampled forecasts the same input for a fixed share of
the workload's jobs, so that what such reports are worth can be measured.

Which jobs report is a fixed draw per job id (CRC-32, like the estimator's
draws), the same in every policy's run. A reporting job's attempt has a
measured rate once it has run ``MEASURED_AFTER_S``: the live rate needs two
reports, and a job reports every few tens of steps. Its remainder is then
exact (the simulated job runs at one rate, so a measured rate is its true
rate); a real job's step rate varies, so the live remainders are less exact.
``noise`` (``--progress-noise SIGMA``) takes that into account: each job's
measured remainders are off by a factor ``exp(SIGMA x z)``, ``z`` a standard
normal drawn once per job id (a job whose rate is misread stays misread, the
pessimistic case: its errors do not average out over forecasts). A pending job
keeps the history estimate, as live: what a resumed attempt redoes after its
checkpoint is not reported.

Pure: no clock, no randomness beyond the per-id draw, no I/O.
"""

from __future__ import annotations

import math
import random
import zlib
from collections.abc import Callable, Iterable

from scheduler.core.model import RunningJob
from scheduler.core.runtime_estimate import spread

#: Seconds an attempt runs before its reports give a rate (two reports a few tens of steps apart).
MEASURED_AFTER_S = 60.0


def check_share(share: float) -> float:
    """``share`` if it is a number in [0, 1]; else ``ValueError`` naming ``--progress-reports``."""
    if not _is_number(share) or not 0.0 <= share <= 1.0:
        raise ValueError(f"--progress-reports must be a share between 0 and 1, got {share!r}")
    return float(share)


def check_noise(sigma: float) -> float:
    """``sigma`` if it is a number in [0, 3]; else ``ValueError`` naming ``--progress-noise``."""
    if not _is_number(sigma) or not 0.0 <= sigma <= 3.0:
        raise ValueError(f"--progress-noise must be a number between 0 and 3, got {sigma!r}")
    return float(sigma)


def _is_number(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def misread(job_id: str, sigma: float) -> float:
    """The fixed factor by which job ``job_id``'s measured remainders are off (1 when ``sigma`` is 0)."""
    if not sigma:
        return 1.0
    return math.exp(sigma * random.Random(zlib.crc32(f"rate:{job_id}".encode())).gauss(0.0, 1.0))


def reports_progress(job_id: str, share: float) -> bool:
    """Whether job ``job_id`` is one of the ``share`` of jobs that report their progress (fixed per id)."""
    if share <= 0.0:
        return False
    if share >= 1.0:
        return True
    return spread(f"progress:{job_id}") < share


def measured_remainders(running: Iterable[RunningJob], now: float, share: float,
                        duration_of: Callable[[str], float], noise: float = 0.0,
                        rate_of: Callable[[str], float] = lambda job_id: 1.0) -> dict[str, float]:
    """Seconds left, keyed by job id, of the running jobs that report progress and whose attempt has
    run at least ``MEASURED_AFTER_S`` at ``now``: the job's work left (``duration_of(job_id)``, its
    true total work, less its progress) at the rate its attempt runs (``rate_of(job_id)``, seconds of
    work per second: a step rate measures the attempt's own speed), off by ``misread(job_id,
    noise)``. Jobs being preempted are left out (they vacate; what they have left is moot), and
    adaptive jobs (their progress is not in seconds of work; a forecast runs them by their model)."""
    out: dict[str, float] = {}
    if share <= 0.0:
        return out
    for r in running:
        jid = r.spec.id
        if r.preempting or r.spec.adaptive is not None or now - r.attempt_start < MEASURED_AFTER_S \
                or not reports_progress(jid, share):
            continue
        out[jid] = max(duration_of(jid) - r.progress, 0.0) / rate_of(jid) * misread(jid, noise)
    return out


__all__ = ["MEASURED_AFTER_S", "check_noise", "check_share", "measured_remainders", "misread", "reports_progress"]
