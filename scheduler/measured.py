"""What jobs measured of themselves, for the scheduling loop and the forecasts.

Jobs report their own progress (steps, total steps, checkpoints) through the
``jobprogress`` app, which sits above the scheduling layer and so cannot be
imported by it. Instead it registers its readers here when it starts
(``JobProgressConfig.ready``), as the web face subscribes to announcements:

* steps sources give, per job, the iterations done and the total it declared
  (Rubick's remaining work, ``scheduler.snapshot``);
* remaining-time sources give, per running job, the seconds of work it has
  left at its measured rate (start-time forecasts, ``scheduler.forecasts``);
* epochs sources give, per job, the epoch it has reached (adaptive jobs'
  progress, ``scheduler.adaptive_jobs``).

With no source registered (a deployment without the app) both answer nothing
and the scheduler estimates as before. A source that fails is logged and
skipped: what jobs say of themselves is advice, never a reason to stop a cycle.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime

log = logging.getLogger(__name__)

#: Job ids -> (iterations done, total iterations) for the jobs that declared a total.
StepsSource = Callable[[list[int]], Mapping[int, tuple[float, int]]]
#: Running job ids, now -> seconds of work left, for the jobs whose rate is measured.
RemainingSource = Callable[[list[int], datetime], Mapping[int, float]]

#: Job ids -> the epoch (fractional) each has reached, for the jobs that report one.
EpochsSource = Callable[[list[int]], Mapping[int, float]]

_steps_sources: list[StepsSource] = []
_remaining_sources: list[RemainingSource] = []
_epochs_sources: list[EpochsSource] = []


def add_steps_source(source: StepsSource) -> None:
    """Have the loop use ``source``'s step counts (once, however often it is added)."""
    if source not in _steps_sources:
        _steps_sources.append(source)


def add_remaining_source(source: RemainingSource) -> None:
    """Have forecasts use ``source``'s measured remainders (once, however often it is added)."""
    if source not in _remaining_sources:
        _remaining_sources.append(source)


def add_epochs_source(source: EpochsSource) -> None:
    """Have the loop use ``source``'s epochs (once, however often it is added)."""
    if source not in _epochs_sources:
        _epochs_sources.append(source)


def epochs(job_ids: Iterable[int]) -> dict[int, float]:
    """Every epochs source's answer for ``job_ids``: the epoch per job that reported one."""
    ids = list(job_ids)
    out: dict[int, float] = {}
    for source in _epochs_sources if ids else ():
        out.update({int(k): float(v) for k, v in _ask(source, ids).items()})
    return out


def steps(job_ids: Iterable[int]) -> dict[int, tuple[float, int]]:
    """Every steps source's answer for ``job_ids``: (done, total) per job that has one."""
    ids = list(job_ids)
    out: dict[int, tuple[float, int]] = {}
    for source in _steps_sources if ids else ():
        out.update(_ask(source, ids))
    return out


def remaining_seconds(job_ids: Iterable[int], now: datetime) -> dict[str, float]:
    """Every remaining-time source's answer for ``job_ids``, keyed as ``JobSpec.id``."""
    ids = list(job_ids)
    out: dict[str, float] = {}
    for source in _remaining_sources if ids else ():
        out.update({str(k): float(v) for k, v in _ask(source, ids, now).items()})
    return out


def _ask(source: Callable, *args: object) -> Mapping:
    try:
        return source(*args)
    except Exception:  # noqa: BLE001 - a job's own report is advice; one bad source must not stop a cycle
        log.exception("measured-progress source %r failed; the scheduler's own estimates are used", source)
        return {}
