"""Loader for the Rubick (Morphling) workloads: ``--trace-format morphling``.

Format: ``../shared/traces/README.md`` section 3. One row per job with
``name, submission_time, duration, application, num_gpus, num_cpus,
bandwidth, exec_plan, steps, is_sla``; the folder two levels up from the
workload file holds ``placements/`` and ``profiles/``.

What a job becomes (docs/rubick.md explains each choice):

* a BE job (the traces have no TE jobs) asking for ``num_gpus`` GPUs and
  ``num_cpus`` CPUs, with the user's plan ``exec_plan``, ``steps``
  iterations to run, guaranteed when ``is_sla`` is 1;
* its plans: every plan measured for its model in ``placements/`` (the plan
  space the authors measured), plus the user's; its GPU range: 1 to
  ``max_gpus`` (the cluster);
* its true speed (``SimJob.speed``): the measured iteration time of a plan and
  placement when measured, else the performance model fitted from
  ``profiles/`` (the simulator counts how often); its ``duration`` is
  ``steps`` times the true iteration time of the user's plan on the requested
  GPUs packed onto 8-GPU nodes;
* what policies see (``JobSpec.throughput``): the same measured-then-modelled
  times by default, the model alone (``policy_times="model"``), or the
  measurements alone (``"measured-only"``: a policy then never picks a
  configuration nobody measured).

The ``duration`` column is not the work: it is read and checked (> 0) and its
total is reported beside ours, because for ``workload-bp`` the users' better
plans do not change it. ``bandwidth`` is checked (>= 0) and not used: the
simulator gives multi-node jobs the measured inter-node bandwidth.

A malformed row raises ``TraceError`` naming the file, line and column.
"""

from __future__ import annotations

import csv
import math
import os
from dataclasses import dataclass, replace
from pathlib import Path

from scheduler.core.elastic import IterTimes, PlanThroughput
from scheduler.core.model import JobClass, JobSpec
from scheduler.core.perf.catalog import spec_for
from scheduler.core.perf.data import DataError, load_placements
from scheduler.core.perf.plans import PlanError, parse_plan
from scheduler.core.perf.throughput import ThroughputModel, packed_placement
from scheduler.sim.workloads.canonical import TraceError
from scheduler.sim.workloads.types import SimJob, Workload, sort_jobs

COLUMNS = (
    "name", "submission_time", "duration", "application", "num_gpus", "num_cpus",
    "bandwidth", "exec_plan", "steps", "is_sla",
)
NODE_GPUS = 8
TESTBED = (8, 8, 96.0, 1600.0)
"""The authors' testbed: nodes, GPUs, CPUs and GB of memory per node."""
POLICY_TIMES = ("measured", "model", "measured-only")


@dataclass(frozen=True, slots=True)
class ReplaySpeed:
    """``SimJob.speed``: the true iteration times of one job's model."""

    times: IterTimes
    model: str
    reference: float

    def iter_time(self, plan: str, placement: tuple[int, ...], cpus: float | None) -> tuple[float, bool] | None:
        found = self.times.lookup(self.model, plan, placement, cpus)
        return None if found is None else (found.seconds, found.measured)


@dataclass(frozen=True)
class MorphlingData:
    """The fitted model and the measured times, shared by the jobs of a workload."""

    root: Path
    truth: IterTimes
    model_only: IterTimes
    measured_only: IterTimes

    @staticmethod
    def load(root: str | os.PathLike[str]) -> "MorphlingData":
        root = Path(root)
        try:
            tm = ThroughputModel.from_traces(root)
            measured = {
                name: load_placements(root / "placements" / f"{spec_for(name).placements}.csv") for name in tm.models()
            }
        except (DataError, OSError) as e:
            raise TraceError(str(root), 0, None, f"cannot read the performance data: {e}") from None
        return MorphlingData(root, IterTimes(tm, measured), IterTimes(tm), IterTimes(tm, measured, fallback=False))


def data_root(trace: str | os.PathLike[str]) -> Path:
    """``<root>`` of ``<root>/workloads/<file>.csv``."""
    return Path(trace).resolve().parent.parent


def load_morphling(path: str | os.PathLike[str], *, max_gpus: int = TESTBED[0] * TESTBED[1],
                   policy_times: str = "measured", grace_period: float = 0.0,
                   data: MorphlingData | None = None, node_gpus: int = NODE_GPUS) -> Workload:
    """Read a Rubick workload file (see the module doc); ``TraceError`` on a bad row.

    ``node_gpus`` is the GPUs per node of the cluster the jobs will run on: a
    job whose 3D plan has a tensor-parallel degree above it is refused, since
    no node can hold one of its tensor-parallel groups (every policy keeps a
    group on one node)."""
    name = os.fspath(path)
    if policy_times not in POLICY_TIMES:
        raise ValueError(f"policy_times must be one of {', '.join(POLICY_TIMES)}, got {policy_times!r}")
    if not (isinstance(max_gpus, int) and max_gpus >= 1):
        raise ValueError(f"max_gpus must be an integer >= 1, got {max_gpus!r}")
    if not (isinstance(node_gpus, int) and node_gpus >= 1):
        raise ValueError(f"node_gpus must be an integer >= 1, got {node_gpus!r}")
    if not grace_period >= 0:
        raise ValueError(f"grace_period must be >= 0, got {grace_period!r}")
    try:
        f = open(name, newline="", encoding="utf-8-sig")
    except OSError as e:
        raise TraceError(name, 0, None, f"cannot open: {e.strerror}") from None
    data = data or MorphlingData.load(data_root(name))
    seen = policy_times_source(data, policy_times)
    with f:
        reader = csv.DictReader(f)
        header = [h.strip() for h in (reader.fieldnames or [])]
        if not header:
            raise TraceError(name, 1, None, "empty file: a header row is required")
        reader.fieldnames = header
        missing = [c for c in COLUMNS if c not in header]
        if missing:
            raise TraceError(name, 1, missing[0], f"missing required column (header has: {', '.join(header)})")
        jobs: list[SimJob] = []
        ids: set[str] = set()
        trace_gpu_seconds = 0.0
        for row in reader:
            if all(not (v or "").strip() for k, v in row.items() if k is not None):
                continue
            line = reader.line_num
            if None in row or any(row.get(c) is None for c in COLUMNS):
                raise TraceError(name, line, None, f"expected {len(header)} fields")
            job, trace_duration = _job(row, name, line, data, seen, max_gpus, grace_period, node_gpus)
            if job.spec.id in ids:
                raise TraceError(name, line, "name", f"duplicate id {job.spec.id!r}")
            ids.add(job.spec.id)
            jobs.append(job)
            trace_gpu_seconds += trace_duration * job.spec.num_gpus
    return Workload(
        name=f"trace {os.path.basename(name)} (morphling, {len(jobs)} jobs)",
        jobs=sort_jobs(jobs),
        notes=_notes(jobs, trace_gpu_seconds, policy_times),
    )


def policy_times_source(data: MorphlingData, policy_times: str) -> IterTimes:
    return {"measured": data.truth, "model": data.model_only, "measured-only": data.measured_only}[policy_times]


def _number(row: dict[str, str], col: str, source: str, line: int, *, integer: bool = False,
            minimum: float | None = None, positive: bool = False) -> float:
    raw = (row[col] or "").strip()
    try:
        value = float(raw)
    except ValueError:
        raise TraceError(source, line, col, f"{raw!r} is not a number") from None
    if not math.isfinite(value):
        raise TraceError(source, line, col, f"{raw!r} is not finite")
    if integer and value != int(value):
        raise TraceError(source, line, col, f"{raw!r} must be an integer")
    if positive and value <= 0:
        raise TraceError(source, line, col, f"{raw!r} must be > 0")
    if minimum is not None and value < minimum:
        raise TraceError(source, line, col, f"{raw!r} must be >= {minimum:g}")
    return int(value) if integer else value


def _job(row: dict[str, str], source: str, line: int, data: MorphlingData, seen: IterTimes,
         max_gpus: int, grace: float, node_gpus: int = NODE_GPUS) -> tuple[SimJob, float]:
    job_id = (row["name"] or "").strip()
    if not job_id:
        raise TraceError(source, line, "name", "empty job name")
    submit = _number(row, "submission_time", source, line, minimum=0.0)
    trace_duration = _number(row, "duration", source, line, positive=True)
    try:
        model = spec_for(row["application"]).name
    except KeyError as e:
        raise TraceError(source, line, "application", str(e.args[0])) from None
    gpus = _number(row, "num_gpus", source, line, integer=True, minimum=1)
    if gpus > max_gpus:
        raise TraceError(source, line, "num_gpus", f"{gpus} GPUs, more than the cluster's {max_gpus}")
    cpus = _number(row, "num_cpus", source, line, minimum=0.0)
    if cpus and cpus < gpus:
        raise TraceError(source, line, "num_cpus", f"{cpus:g} CPUs for {gpus} GPUs: at least one per GPU")
    _number(row, "bandwidth", source, line, minimum=0.0)
    steps = _number(row, "steps", source, line, integer=True, minimum=1)
    sla = _number(row, "is_sla", source, line, integer=True, minimum=0)
    if sla > 1:
        raise TraceError(source, line, "is_sla", f"{row['is_sla']!r} must be 0 or 1")
    try:
        parsed = parse_plan(row["exec_plan"])
    except PlanError as e:
        raise TraceError(source, line, "exec_plan", str(e)) from None
    plan = parsed.name
    if parsed.is_3d and parsed.tp > node_gpus:
        raise TraceError(source, line, "exec_plan",
                         f"plan {plan} needs tensor-parallel groups of {parsed.tp} GPUs on one node; "
                         f"the cluster's nodes have {node_gpus}")
    user_cpus = cpus or None
    truth = data.truth.lookup(model, plan, packed_placement(gpus, NODE_GPUS), user_cpus)
    if truth is None:
        raise TraceError(source, line, "exec_plan", f"plan {plan} cannot run {model} on {gpus} GPUs")
    plans = tuple(sorted(set(data.truth.measured_plans(model)) | {plan}))
    throughput = PlanThroughput(seen, model, plans, plan, gpus, user_cpus, NODE_GPUS)
    spec = JobSpec(
        id=job_id, job_class=JobClass.BE, num_gpus=gpus, submit_time=submit, num_cpus=cpus,
        grace_period=grace, model=model, plan=plan, allowed_plans=plans, min_gpus=1,
        max_gpus=max(max_gpus, gpus), guaranteed=bool(sla), steps=steps, throughput=throughput,
    )
    speed = ReplaySpeed(data.truth, model, truth.seconds)
    return SimJob(spec, steps * truth.seconds, speed), trace_duration


POLICY_VIEWS = {
    "measured": "measured iteration times (the model where not measured)",
    "model": "the performance model only",
    "measured-only": "measured iteration times only (unmeasured configurations are never chosen)",
}


def _notes(jobs: list[SimJob], trace_gpu_seconds: float, policy_times: str) -> tuple[str, ...]:
    ours = sum(j.duration * j.spec.num_gpus for j in jobs)
    guaranteed = sum(1 for j in jobs if j.spec.guaranteed)
    measured = 0
    for j in jobs:
        speed = j.speed
        found = speed.times.lookup(speed.model, j.spec.plan, packed_placement(j.spec.num_gpus, NODE_GPUS),
                                   j.spec.num_cpus or None)
        measured += 1 if found is not None and found.measured else 0
    return (
        f"work = steps x iteration time of the user's plan on the requested GPUs: {ours / 3600:.1f} GPU-h "
        f"(the trace's duration column: {trace_gpu_seconds / 3600:.1f} GPU-h); "
        f"{measured} of {len(jobs)} requested configurations measured, the rest modelled",
        f"{guaranteed} guaranteed jobs; policies see {POLICY_VIEWS[policy_times]}",
    )


def mixed_workload(base: Workload, *, seed: int = 0, te_jobs: int = 200, max_be_gpus: int = NODE_GPUS,
                   te_gpus: tuple[tuple[int, float], ...] = ((1, 0.7), (2, 0.2), (4, 0.1)),
                   te_median: float = 600.0, te_sigma: float = 1.0,
                   te_limits: tuple[float, float] = (60.0, 7200.0)) -> Workload:
    """TE jobs meeting reconfigurable BE jobs (issue 6, item 5).

    BE: the jobs of ``base`` on at most ``max_be_gpus`` GPUs whose plan is of
    the data-parallel family (so any policy's placement can run them), each
    with a grace period drawn per job as in the synthetic workload. TE:
    ``te_jobs`` plain jobs arriving as a Poisson process over the BE arrival
    span, sized and timed like the synthetic workload's TE jobs (1/2/4 GPUs
    at 70/20/10 %, log-normal run time, median 600 s, sigma 1, clipped to
    60 s-2 h). Seeded: the same arguments give the same jobs.
    """
    import random

    from scheduler.sim.workloads.grace import draw_grace, job_rng

    be = []
    for j in base.jobs:
        if j.spec.num_gpus <= max_be_gpus and not parse_plan(j.spec.plan).is_3d:
            grace = draw_grace(job_rng(seed, j.spec.id))
            be.append(SimJob(replace(j.spec, grace_period=grace), j.duration, j.speed))
    if not be:
        raise ValueError("mixed workload: no BE job of the base workload qualifies")
    span = max(j.spec.submit_time for j in be)
    rng = random.Random(f"morphling-te-{seed}")
    total_weight = sum(w for _, w in te_gpus)
    te = []
    t = 0.0
    for i in range(te_jobs):
        t += rng.expovariate(te_jobs / span)
        x = rng.random() * total_weight
        gpus = next((g for g, w in _cumulative(te_gpus) if x < w), te_gpus[-1][0])
        duration = min(te_limits[1], max(te_limits[0], round(te_median * math.exp(te_sigma * rng.gauss(0.0, 1.0)))))
        spec = JobSpec(id=f"te-{i:03d}", job_class=JobClass.TE, num_gpus=gpus, submit_time=round(t, 3),
                       grace_period=draw_grace(job_rng(seed, f"te-{i:03d}")))
        te.append(SimJob(spec, float(duration)))
    return Workload(
        name=f"{base.name} + {te_jobs} TE jobs (seed {seed})",
        jobs=sort_jobs(be + te),
        notes=(f"BE: {len(be)} single-node data-parallel jobs of the base workload, grace periods drawn per job; "
               f"TE: {te_jobs} jobs, 1/2/4 GPUs, log-normal run time median {te_median:g} s", *base.notes),
    )


def _cumulative(table: tuple[tuple[int, float], ...]) -> list[tuple[int, float]]:
    out, acc = [], 0.0
    for g, w in table:
        acc += w
        out.append((g, acc))
    return out
