"""Reconfigurable jobs on the live cluster: the request's rules, the throughput
function policies see, and what a relaunch is told.

* ``clean_request`` checks and normalizes what a submission declares (model,
  plan, allowed plans, GPU range, guaranteed); errors name the field.
* ``iter_times`` is the performance model fitted from the traces folder
  (``settings.GPUSCHED_TRACES_DIR``, else ``$GPUSCHED_TRACES_DIR``, else
  ``../shared/traces`` next to the repository, as ``python -m scheduler.perf``
  finds it), fitted once per process and cached, failures included: without
  it reconfigurable jobs simply run as requested, and one log line says why.
* ``spec_fields`` / ``running_fields`` are what the snapshot adds to a job's
  ``JobSpec`` and ``RunningJob``. They read plain values (a model instance or
  a ``values()`` dict), so the snapshot may read rows either way.
* ``grad_accum_steps`` and ``launch_fields``: what an attempt's launch
  command says (the agent exports it, docs/agent.md).

Global batch. Every plan of a model processes the same global batch per
iteration (the performance model's convention). A job declares its batch for
its request: ``plan`` on ``num_gpus`` GPUs with one accumulation step. When it
runs with a data-parallel width ``w`` (the GPU count, or ``dp`` of a 3D plan)
instead of the requested ``w0``, it is told to accumulate
``ceil(w0 / w)`` micro-batches per step, so that micro-batch x accumulation x
width stays the requested global batch (exactly when ``w`` divides ``w0``;
otherwise the job sizes its micro-batch as global batch / (width x
accumulation), as ``examples/train_numpy.py`` does).
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from django.conf import settings

from scheduler import adaptive_jobs
from scheduler.core.elastic import IterTimes, PlanThroughput
from scheduler.core.perf.__main__ import morphling_dir
from scheduler.core.perf.catalog import spec_for
from scheduler.core.perf.data import DataError, load_placements
from scheduler.core.perf.fit import FitError
from scheduler.core.perf.plans import PlanError, check_plan_fits, parse_plan
from scheduler.core.perf.throughput import NODE_GPUS, ThroughputModel, packed_placement
from scheduler.gpu_allocation import gpu_count

log = logging.getLogger(__name__)

# NODE_GPUS: GPUs per node of the reference allocation (the user's plan on the requested
# GPUs packed onto nodes of this size), as in the traces the model is fitted on.
MAX_ALLOWED_PLANS = 16

#: Job fields (model instance attributes or ``values()`` keys) the snapshot needs for them.
SPEC_FIELDS = ("model", "plan", "allowed_plans", "min_gpus", "max_gpus", "guaranteed",
               "target_plan", "target_gpus", "reconfiguration_count", "last_reconfigured_at")
#: Attempt fields ``running_fields`` reads.
ATTEMPT_FIELDS = ("plan", "notice_reason", "notice_at", "preempted_for")


def _get(row: Any, name: str) -> Any:
    return row[name] if isinstance(row, Mapping) else getattr(row, name)


# --- the request ------------------------------------------------------------------------


def clean_request(*, num_gpus: int, model: str = "", plan: str = "", allowed_plans: Any = (),
                  min_gpus: int | None = None, max_gpus: int | None = None,
                  guaranteed: bool = False) -> tuple[dict[str, Any], dict[str, list[str]]]:
    """The normalized reconfiguration fields of a request and the rules it breaks, by field.

    Rules: ``model`` is a model of the performance model's catalog (any case,
    aliases accepted; stored by its canonical name); ``plan`` and every allowed
    plan parse (``scheduler.core.perf.plans``; stored by canonical name) and a
    3D plan fits the requested GPUs; allowed plans, a GPU range and
    ``guaranteed`` need a model; ``1 <= min_gpus <= num_gpus <= max_gpus``.
    A model without a plan runs ``ga``. Nothing else is changed.
    """
    errors: dict[str, list[str]] = {}

    def add(name: str, message: str) -> None:
        errors.setdefault(name, []).append(message)

    model = (model or "").strip()
    plan = (plan or "").strip()
    out: dict[str, Any] = {"model": "", "plan": "", "allowed_plans": [], "min_gpus": 0, "max_gpus": 0,
                           "guaranteed": bool(guaranteed)}
    if model:
        try:
            out["model"] = spec_for(model).name
        except KeyError as exc:
            add("model", str(exc.args[0]))
    if plan:
        try:
            parsed = parse_plan(plan)
            out["plan"] = parsed.name
            if parsed.is_3d and num_gpus >= 1:
                check_plan_fits(parsed, packed_placement(num_gpus, max(NODE_GPUS, num_gpus)))
        except PlanError as exc:
            add("plan", str(exc))
    elif model:
        out["plan"] = "ga"
    if isinstance(allowed_plans, str):
        allowed_plans = [p for p in allowed_plans.replace(",", " ").split() if p]
    if not isinstance(allowed_plans, (list, tuple)):
        add("allowed_plans", "Must be a list of plan names.")
        allowed_plans = []
    names: set[str] = set()
    for i, text in enumerate(allowed_plans):
        try:
            names.add(parse_plan(text).name)
        except PlanError as exc:
            add("allowed_plans", f"[{i}]: {exc}")
    if len(names) > MAX_ALLOWED_PLANS:
        add("allowed_plans", f"At most {MAX_ALLOWED_PLANS} plans.")
    if names and out["plan"]:
        names.add(out["plan"])
    out["allowed_plans"] = sorted(names)
    if min_gpus is not None:
        if min_gpus < 1:
            add("min_gpus", "Must be at least 1.")
        elif min_gpus > num_gpus:
            add("min_gpus", f"Must be at most num_gpus ({num_gpus}).")
        else:
            out["min_gpus"] = min_gpus
    if max_gpus is not None:
        if max_gpus < num_gpus:
            add("max_gpus", f"Must be at least num_gpus ({num_gpus}).")
        else:
            out["max_gpus"] = max_gpus
    if min_gpus is not None and max_gpus is not None and min_gpus > max_gpus:
        add("min_gpus", "Must not be more than max_gpus.")
    if not model:
        for name, given in (("allowed_plans", bool(names)), ("min_gpus", min_gpus is not None),
                            ("max_gpus", max_gpus is not None), ("guaranteed", bool(guaranteed))):
            if given:
                add(name, "Needs a model: only a job the performance model knows can be reconfigured.")
    return out, errors


# --- the performance model --------------------------------------------------------------

_lock = threading.Lock()
_times: dict[str, IterTimes | None] = {}
_throughputs: dict[tuple, PlanThroughput | None] = {}


def traces_root() -> Path:
    """The ``morphling`` folder of the configured traces folder."""
    return morphling_dir(getattr(settings, "GPUSCHED_TRACES_DIR", "") or None)


def iter_times() -> IterTimes | None:
    """Measured-then-modelled iteration times (as the simulator uses them), or None
    when the traces cannot be read; computed once per process per folder."""
    root = traces_root()
    key = str(root)
    with _lock:
        if key in _times:
            return _times[key]
        try:
            model = ThroughputModel.from_traces(root)
            measured = {name: load_placements(root / "placements" / f"{spec_for(name).placements}.csv")
                        for name in model.models()}
            found: IterTimes | None = IterTimes(model, measured)
            log.info("performance model fitted from %s: reconfigurable jobs enabled", root)
        except (DataError, FitError, OSError, ValueError) as exc:
            found = None
            log.warning("no performance model (traces at %s: %s): jobs that declare a model run as requested, "
                        "never reconfigured; set GPUSCHED_TRACES_DIR to the traces folder", root, exc)
        _times[key] = found
        return found


def reset_cache() -> None:
    """Forget the fitted model (tests that change the traces folder)."""
    with _lock:
        _times.clear()
        _throughputs.clear()


def throughput(model: str, plans: tuple[str, ...], plan: str, num_gpus: int,
               num_cpus: float) -> PlanThroughput | None:
    """``JobSpec.throughput`` of a job, shared by jobs asking the same (its memo is
    then shared too); None without a model, without the performance model, or
    when the user's plan cannot run as requested (logged)."""
    if not model:
        return None
    times = iter_times()
    if times is None:
        return None
    key = (model, plans, plan, num_gpus, num_cpus)
    if key in _throughputs:
        return _throughputs[key]
    found: PlanThroughput | None = PlanThroughput(times, model, plans, plan, num_gpus, num_cpus or None, NODE_GPUS)
    try:
        found.reference()
    except (PlanError, KeyError) as exc:
        log.warning("model %s: %s; such jobs are not reconfigured", model, exc)
        found = None
    _throughputs[key] = found
    return found


# --- snapshot fields --------------------------------------------------------------------


def spec_fields(job: Any) -> dict[str, Any]:
    """``JobSpec`` keyword arguments for a job's reconfiguration fields (``SPEC_FIELDS``
    and ``num_gpus``, ``num_cpus``, ``mem_gb``).

    A job with a reconfiguration pending (``target_gpus``) is pinned: it asks
    for exactly the target plan and GPU count, with CPUs and memory in
    proportion, so any policy starts it as decided.
    """
    model = _get(job, "model")
    if not model:
        return {}
    num_gpus, num_cpus, mem_gb = _get(job, "num_gpus"), _get(job, "num_cpus"), _get(job, "mem_gb")
    plan = _get(job, "plan") or "ga"
    plans = tuple(_get(job, "allowed_plans") or ()) or (plan,)
    fields: dict[str, Any] = {
        "model": model, "plan": plan, "allowed_plans": tuple(_get(job, "allowed_plans") or ()),
        "min_gpus": _get(job, "min_gpus"), "max_gpus": _get(job, "max_gpus"), "guaranteed": _get(job, "guaranteed"),
        "throughput": throughput(model, plans, plan, num_gpus, num_cpus),
    }
    target = _get(job, "target_gpus")
    if target:
        fields.update(num_gpus=target, num_cpus=num_cpus * target / num_gpus, mem_gb=mem_gb * target / num_gpus,
                      plan=_get(job, "target_plan") or plan, allowed_plans=(), min_gpus=0, max_gpus=0)
    return fields


def running_fields(job: Any, attempt: Any, gpus: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """For a job holding ``gpus`` GPUs in ``attempt``: the ``JobSpec`` changes (the
    current allocation, which may differ from the request) and the ``RunningJob``
    fields (plan, reconfiguration history, reconfiguring). Both empty for a job
    without a model (an adaptive job has them too)."""
    if not (_get(job, "model") or _get(job, "adaptive_app")):
        return {}, {}
    num_gpus = _get(job, "num_gpus")
    spec = {"num_gpus": gpus, "num_cpus": _get(job, "num_cpus") * gpus / num_gpus,
            "mem_gb": _get(job, "mem_gb") * gpus / num_gpus}
    last = _get(job, "last_reconfigured_at")
    reconfiguring = _get(attempt, "notice_reason") == "reconfigure" and _get(job, "state") == "PREEMPTING"
    for_job = _get(attempt, "preempted_for")
    running = {
        "plan": _get(attempt, "plan") or _get(job, "plan") or "ga",
        "reconfigurations": _get(job, "reconfiguration_count"),
        "last_reconfigure": None if last is None else last.timestamp(),
        "reconfiguring": reconfiguring,
    }
    if reconfiguring:
        running.update(preempting=False, preempted_for=None,
                       reconfigured_for=None if for_job is None else str(for_job))
    return spec, running


def gpu_count_ok(job: Any, gpus: int) -> bool:
    """Whether an attempt of ``job`` may hold ``gpus`` GPUs (the request, or its range)."""
    if gpus == _get(job, "num_gpus"):
        return True
    if _get(job, "adaptive_app"):
        return adaptive_jobs.gpu_count_ok(job, gpus)
    if not _get(job, "model"):
        return False
    low = _get(job, "min_gpus") or _get(job, "num_gpus")
    high = _get(job, "max_gpus") or _get(job, "num_gpus")
    return low <= gpus <= high


# --- what an attempt is told ------------------------------------------------------------


def data_parallel_width(plan: str, gpus: int) -> int:
    """Replicas that split a global batch: ``dp`` of a 3D plan, else every GPU."""
    try:
        parsed = parse_plan(plan) if plan else None
    except PlanError:
        parsed = None
    return parsed.dp if parsed is not None and parsed.is_3d else gpus


def grad_accum_steps(requested_plan: str, requested_gpus: int, plan: str, gpus: int) -> int:
    """Micro-batches to accumulate per step on ``plan``/``gpus`` so that the global
    batch stays the request's (``requested_plan`` on ``requested_gpus``, one step)."""
    return max(1, math.ceil(data_parallel_width(requested_plan, requested_gpus) / data_parallel_width(plan, gpus)))


def launch_fields(*, plan: str, gpus: int, grad_accum: int, requested_gpus: int) -> dict[str, Any]:
    """The ``LaunchCommand`` fields of an attempt with ``plan`` on ``gpus`` GPUs (all
    nodes); empty without a plan (a job that declared none is told nothing)."""
    if not plan:
        return {}
    return {"plan": plan, "num_gpus": gpus, "grad_accum_steps": grad_accum, "requested_gpus": requested_gpus}


def attempt_launch_fields(job: Any, attempt: Any) -> dict[str, Any]:
    """``launch_fields`` of a stored attempt (a re-sent launch says what the first did)."""
    gpus = gpu_count(_get(attempt, "gpu_allocation"))
    if _get(job, "adaptive_app"):
        return adaptive_jobs.launch_fields(gpus=gpus, requested_gpus=_get(job, "num_gpus"),
                                           steps=_get(attempt, "grad_accum_steps"), batch=_get(attempt, "batch_size"))
    return launch_fields(plan=_get(attempt, "plan"), gpus=gpus, grad_accum=_get(attempt, "grad_accum_steps"),
                         requested_gpus=_get(job, "num_gpus"))
