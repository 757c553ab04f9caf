"""Adaptive jobs on the live cluster (Pollux, Qiao et al., OSDI 2021): the request's
rules, the model a policy reads, and the batch size an attempt is told.

A job declares itself adaptive with ``adaptive_app``, the name of an
application profile: a folder of the traces' ``pollux/apps`` (measured step
and synchronisation times per placement and batch, and gradient statistics
per batch and epoch; ``scheduler.sim.workloads.pollux_data`` reads them, the
simulator's Pollux world uses the same). The profiles are read once per
process and cached, failures included: without them adaptive jobs run as
requested on ``num_gpus`` and one log line says why.

* ``clean_request``: the profile exists; ``max_gpus`` (most GPUs the job may
  get; 0: ``num_gpus``, so it never holds more than it asked for unless its
  owner says so) within the profile's limit; not with a ``model`` (a job is
  reconfigured by plan or adapted by batch, not both). Errors name the field.
* ``model_for``: the ``AdaptiveModel`` of a job (goodput-optimal batch per
  allocation), which the snapshot puts on its ``JobSpec.adaptive``, so the
  ``pollux`` policy allocates it; other policies run it as requested.
* ``progress_at``: the job's progress in the model's units from the epoch it
  reports (``gpusched.job``'s ``epoch``; ``scheduler.measured.epochs``).
* ``configuration`` / ``launch_fields``: on every start (a reconfiguration's
  relaunch included), the batch with the most goodput on the placement in the
  job's current epoch: the attempt stores it and the job is told
  ``GPUSCHED_BATCH_SIZE`` (global), ``GPUSCHED_LOCAL_BATCH_SIZE`` (per GPU and
  micro-batch) and ``GPUSCHED_GRAD_ACCUM_STEPS`` (micro-batches per step), with
  the plan ``ga`` (data parallel with gradient accumulation). docs/jobs.md
  says what the job must do with them.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from django.conf import settings

from scheduler import measured
from scheduler.core.model import PendingJob, RunningJob
from scheduler.gpu_allocation import gpu_count
from scheduler.models import Attempt

from scheduler.core.perf.__main__ import morphling_dir
from scheduler.sim.workloads.pollux_adaptive import AdaptiveApp
from scheduler.sim.workloads.pollux_app import Application, applications as build_applications
from scheduler.sim.workloads.pollux_data import TraceError, load_apps

log = logging.getLogger(__name__)

#: Seconds an adaptive job loses per allocation change (checkpoint and relaunch), as the Pollux study assumes.
RESTART_SECONDS = 30.0
#: The plan adaptive attempts are launched with: data parallel, with gradient accumulation.
PLAN = "ga"
ENV_BATCH_SIZE = "GPUSCHED_BATCH_SIZE"
ENV_LOCAL_BATCH_SIZE = "GPUSCHED_LOCAL_BATCH_SIZE"

_lock = threading.Lock()
_apps: dict[str, dict[str, Application] | None] = {}
_models: dict[tuple[str, str, int], AdaptiveApp] = {}


def _get(row: Any, name: str) -> Any:
    return row[name] if isinstance(row, Mapping) else getattr(row, name)


def apps_root() -> Path:
    """The ``pollux/apps`` folder of the configured traces folder."""
    return morphling_dir(getattr(settings, "GPUSCHED_TRACES_DIR", "") or None).parent / "pollux" / "apps"


def applications() -> dict[str, Application] | None:
    """The application profiles by name, or None when they cannot be read (logged once)."""
    root = apps_root()
    key = str(root)
    with _lock:
        if key not in _apps:
            try:
                _apps[key] = build_applications(load_apps(root))
                log.info("adaptive-job profiles read from %s: %s", root, ", ".join(sorted(_apps[key] or ())))
            except (TraceError, OSError, ValueError) as exc:
                _apps[key] = None
                log.warning("no adaptive-job profiles (%s: %s): adaptive jobs run as requested; set "
                            "GPUSCHED_TRACES_DIR to the traces folder", root, exc)
        return _apps[key]


def reset_cache() -> None:
    """Forget the profiles and models (tests that change the traces folder)."""
    with _lock:
        _apps.clear()
        _models.clear()


def gpu_limit(app: Application) -> int:
    """Most GPUs a job of ``app`` can use (``AdaptiveApp.gpu_limit``)."""
    return AdaptiveApp.gpu_limit(app)


# --- the request ------------------------------------------------------------------------


def clean_request(*, num_gpus: int, adaptive_app: str, max_gpus: int | None, model: str = "",
                  job_class: str = "BE") -> tuple[dict[str, Any], dict[str, list[str]]]:
    """The normalized adaptive fields (``adaptive_app``, and ``max_gpus`` when given) and the rules
    broken, by field; ({}, {}) for a job that is not adaptive. Only BE jobs may be adaptive: a TE
    job runs on one node as asked, at once, and is never reallocated."""
    name = (adaptive_app or "").strip().lower()
    if not name:
        return {}, {}
    errors: dict[str, list[str]] = {}
    if model:
        errors["adaptive_app"] = ["A job is either adaptive or declares a model, not both."]
    if job_class != "BE":
        errors.setdefault("adaptive_app", []).append("Only BE jobs can be adaptive.")
    apps = applications()
    if apps is None:
        errors.setdefault("adaptive_app", []).append("This cluster has no adaptive-job profiles.")
        return {}, errors
    if name not in apps:
        errors.setdefault("adaptive_app", []).append(
            f'"{adaptive_app}" is not a profile; known: {", ".join(sorted(apps))}.')
        return {}, errors
    limit = gpu_limit(apps[name])
    out: dict[str, Any] = {"adaptive_app": name}
    if num_gpus > limit:
        errors["num_gpus"] = [f"A {name} job can use at most {limit} GPUs."]
    if max_gpus is not None:
        if max_gpus < num_gpus:
            errors["max_gpus"] = [f"Must be at least num_gpus ({num_gpus})."]
        elif max_gpus > limit:
            errors["max_gpus"] = [f"A {name} job can use at most {limit} GPUs."]
        else:
            out["max_gpus"] = max_gpus
    return out, errors


# --- what a policy reads ----------------------------------------------------------------


def most_gpus(job: Any) -> int:
    """The most GPUs an adaptive job may hold: its ``max_gpus``, else its request."""
    return _get(job, "max_gpus") or _get(job, "num_gpus")


def model_for(job: Any) -> AdaptiveApp | None:
    """The job's model (goodput-optimal batch per allocation), shared by jobs of one
    profile and limit; None for a job that is not adaptive or without profiles."""
    name = _get(job, "adaptive_app")
    apps = applications() if name else None
    if not apps or name not in apps:
        return None
    key = (str(apps_root()), name, most_gpus(job))
    with _lock:
        if key not in _models:
            _models[key] = AdaptiveApp(apps[name], None, max_gpus=key[2], restart_seconds=RESTART_SECONDS)
        return _models[key]


def spec_fields(job: Any) -> dict[str, Any]:
    """``JobSpec`` fields of an adaptive job (its model); {} without profiles (it runs as requested)."""
    model = model_for(job)
    return {"adaptive": model} if model is not None else {}


def with_measured_progress(running: list[RunningJob], pending: list[PendingJob], now: datetime) -> None:
    """Adaptive jobs' progress in their model's units, from the epoch each reported
    (``scheduler.measured.epochs``; 0 before its first report): the policy's view of
    where the job is in its training, which sets its goodput-optimal batch. Also the
    GPU-seconds each has held and the most GPUs it has held, from its attempts, so that
    Pollux's order and limits do not depend on which worker process runs the cycle."""
    entries = [e for e in (*running, *pending) if e.spec.adaptive is not None]
    if not entries:
        return
    ids = [int(e.spec.id) for e in entries]
    found = measured.epochs(ids)
    held = attempt_history(ids, now)
    for entry in entries:
        entry.progress = progress_at(entry.spec.adaptive, found.get(int(entry.spec.id)))
        entry.attained, entry.most_gpus = held.get(int(entry.spec.id), (0.0, 0))


def attempt_history(job_ids: list[int], now: datetime) -> dict[int, tuple[float, int]]:
    """``(GPU-seconds held, most GPUs held)`` over the attempts of each of ``job_ids`` (an open
    attempt counts until ``now``); jobs without attempts are left out."""
    out: dict[int, tuple[float, int]] = {}
    rows = Attempt.objects.filter(job_id__in=job_ids).values_list("job_id", "gpu_allocation", "started_at", "ended_at")
    for job_id, allocation, started, ended in rows:
        gpus = gpu_count(allocation)
        seconds = max(((ended or now) - started).total_seconds(), 0.0)
        attained, most = out.get(job_id, (0.0, 0))
        out[job_id] = (attained + gpus * seconds, max(most, gpus))
    return out


def progress_at(model: AdaptiveApp, epoch: float | None) -> float:
    """Progress (the model's units) after ``epoch`` epochs, linear within an epoch; 0 when unknown."""
    if epoch is None or not math.isfinite(epoch) or epoch <= 0:
        return 0.0
    whole = min(int(epoch), len(model.bounds) - 1)
    if whole >= len(model.bounds) - 1:
        return float(model.bounds[-1])
    start, end = model.bounds[whole], model.bounds[whole + 1]
    return float(start + (epoch - whole) * (end - start))


def gpu_count_ok(job: Any, gpus: int) -> bool:
    """Whether an attempt of an adaptive ``job`` may hold ``gpus`` GPUs."""
    return 1 <= gpus <= most_gpus(job)


# --- what an attempt is told ------------------------------------------------------------


def configuration(model: AdaptiveApp, per_node: Mapping[str, int], epoch: float | None) -> tuple[int, int, int] | None:
    """``(per-GPU batch, micro-batches per step, global batch)`` for an attempt with
    ``per_node`` GPUs in ``epoch`` (None when the placement cannot run the job)."""
    shape = tuple(sorted((g for g in per_node.values() if g), reverse=True))
    if not shape:
        return None
    return model.best_configuration(shape, int(epoch or 0))


def launch_fields(*, gpus: int, requested_gpus: int, steps: int, batch: int) -> dict[str, Any]:
    """The ``LaunchCommand`` fields of an adaptive attempt (``batch`` 0: none chosen)."""
    fields: dict[str, Any] = {"plan": PLAN, "num_gpus": gpus, "grad_accum_steps": steps,
                              "requested_gpus": requested_gpus}
    if batch:
        local = batch // max(gpus * steps, 1)
        fields["env"] = {ENV_BATCH_SIZE: str(batch), ENV_LOCAL_BATCH_SIZE: str(local)}
    return fields


__all__ = ["ENV_BATCH_SIZE", "ENV_LOCAL_BATCH_SIZE", "PLAN", "RESTART_SECONDS", "applications", "apps_root",
           "clean_request", "configuration", "gpu_count_ok", "gpu_limit", "launch_fields", "model_for",
           "most_gpus", "progress_at", "reset_cache"]
