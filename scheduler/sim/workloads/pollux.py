"""Pollux study workloads as non-adaptive jobs: the study's *TunedJobs*.

In the Pollux study (Qiao et al., OSDI 2021, Section 5.3) the baselines run
each job with the GPUs and global batch size of the trace ("TunedJobs":
configurations the owner tuned beforehand). Such a job's speed still
changes during its run, because its statistical efficiency at a fixed batch
changes from epoch to epoch, but never with the scheduler's choices other
than placement. This loader turns each job into a plain ``SimJob`` whose
``duration`` is the time its requested configuration takes to reach its
application's target (``pollux_app.Application``), summed epoch by epoch:

    duration = RESTART_SECONDS + sum over epochs e of
               (progress_at(e + 1) - progress_at(e)) / goodput(e)

on the requested GPUs packed onto nodes of ``node_gpus`` (4 in the study),
with the batch split as ``Application.fixed_batch`` splits it.
``RESTART_SECONDS`` (30) is the study's restart delay, which its simulator
charges at a job's first start too; later restarts cost the simulator's
``resume_overhead``, set to the same 30 s for the study.

Each job also carries its speed by placement (``TunedSpeed``): placed other
than packed, it runs at the measured throughput of that placement, as in
the study's simulator, whose Tiresias places a job on the nodes with the
most free GPUs (``tiresias:placement=most-free``). On the study's 4-GPU
PCIe nodes a job spread thinner is often faster than packed, not slower.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping

from scheduler.core.model import JobClass, JobSpec
from scheduler.sim.workloads.pollux_adaptive import AdaptiveApp
from scheduler.sim.workloads.pollux_app import Application, applications, canonical_placement
from scheduler.sim.workloads.pollux_data import load_apps, load_workload
from scheduler.sim.workloads.types import SimJob, Workload, sort_jobs

RESTART_SECONDS = 30.0
NODE_GPUS = 4
NODES = 16


def packed(gpus: int, node_gpus: int = NODE_GPUS) -> tuple[int, ...]:
    """Full nodes of ``node_gpus`` and the rest on one more."""
    full, rest = divmod(gpus, node_gpus)
    return (node_gpus,) * full + ((rest,) if rest else ())


def tuned_duration(app: Application, gpus: int, batch_size: int, node_gpus: int = NODE_GPUS) -> float:
    """Seconds the job needs on ``gpus`` packed GPUs at ``batch_size`` (see the module doc)."""
    placement = packed(gpus, node_gpus)
    atomic, accum = app.fixed_batch(batch_size, gpus)
    seconds = RESTART_SECONDS
    for epoch in range(app.max_epochs):
        need = app.progress_at(epoch + 1) - app.progress_at(epoch)
        seconds += need / app.goodput(placement, atomic, accum, epoch)
    return seconds


class TunedSpeed:
    """``SimJob.speed`` of a TunedJob: its measured iteration time on any
    placement at the trace's batch, against that of the packed placement
    (``reference``). The statistical efficiency of a fixed batch does not
    depend on the placement, so the ratio of the two is the ratio of
    goodputs in every epoch: the job progresses that much slower or faster
    than its ``duration`` says."""

    __slots__ = ("app", "atomic", "accum", "reference", "_memo")

    def __init__(self, app: Application, gpus: int, batch_size: int, node_gpus: int = NODE_GPUS) -> None:
        self.app = app
        self.atomic, self.accum = app.fixed_batch(batch_size, gpus)
        self.reference = app.iteration_time(packed(gpus, node_gpus), self.atomic, self.accum)
        self._memo: dict[tuple[int, ...], float] = {}

    def iter_time(self, plan: str, placement: tuple[int, ...], cpus: float | None) -> tuple[float, bool]:
        shape = canonical_placement(placement)
        seconds = self._memo.get(shape)
        if seconds is None:
            seconds = self._memo[shape] = self.app.iteration_time(shape, self.atomic, self.accum)
        return seconds, True


def pollux_root(workload: str | os.PathLike[str]) -> Path:
    """``<root>`` of ``<root>/workloads/<file>.csv``."""
    return Path(workload).resolve().parent.parent


def load_pollux_tuned(path: str | os.PathLike[str], apps: Mapping[str, Application] | None = None,
                      node_gpus: int = NODE_GPUS) -> Workload:
    """A Pollux workload file as TunedJobs (``TraceError`` on a bad row)."""
    apps = apps if apps is not None else applications(load_apps(pollux_root(path) / "apps"))
    jobs = []
    for row in load_workload(path, set(apps)):
        app = apps[row.application]
        spec = JobSpec(row.name, JobClass.BE, row.num_replicas, row.time, model=row.application)
        jobs.append(SimJob(spec, tuned_duration(app, row.num_replicas, row.batch_size, node_gpus),
                           TunedSpeed(app, row.num_replicas, row.batch_size, node_gpus)))
    name = f"trace {os.path.basename(os.fspath(path))} (pollux, {len(jobs)} jobs, TunedJobs)"
    return Workload(name, sort_jobs(jobs), notes=(
        "TunedJobs: each job keeps the trace's GPUs and batch size; duration = time to its application's "
        f"target on packed {node_gpus}-GPU nodes, plus a {RESTART_SECONDS:g} s first start; placed otherwise, "
        "a job runs at that placement's measured speed",
    ))


POLLUX_NCF_BATCH = 32768
"""The study runs ``ncf`` jobs under Pollux at this fixed batch on one GPU."""


def load_pollux_adaptive(path: str | os.PathLike[str], apps: Mapping[str, Application] | None = None,
                         batch: str = "trace", cache: dict | None = None) -> Workload:
    """A Pollux workload file as adaptive jobs (``TraceError`` on a bad row).

    ``batch="trace"``: each job keeps the trace's batch size and may run on
    any GPU count up to ``batch // min_local_bsz`` (the study's
    Optimus+Oracle+TunedJobs). ``batch="adaptive"``: each job runs the
    goodput-optimal batch for its allocation (Pollux), up to 64 GPUs, except
    ``ncf`` which the study runs at batch 32768 on one GPU. ``cache`` (a dict
    the caller keeps) shares models, and their memoized tables, across calls.
    """
    if batch not in ("trace", "adaptive"):
        raise ValueError(f"batch must be 'trace' or 'adaptive', got {batch!r}")
    apps = apps if apps is not None else applications(load_apps(pollux_root(path) / "apps"))
    cache = cache if cache is not None else {}
    jobs = []
    for row in load_workload(path, set(apps)):
        app = apps[row.application]
        fixed: int | None = row.batch_size if batch == "trace" else None
        cap = None
        if batch == "adaptive" and row.application == "ncf":
            fixed, cap = POLLUX_NCF_BATCH, 1
        key = (id(app), fixed, cap)
        if key not in cache:
            cache[key] = AdaptiveApp(app, fixed, cap, RESTART_SECONDS)
        model = cache[key]
        spec = JobSpec(row.name, JobClass.BE, row.num_replicas, row.time, model=row.application,
                       min_gpus=1, max_gpus=model.max_gpus, adaptive=model)
        jobs.append(SimJob(spec, model.target))
    kind = "TunedJobs batch" if batch == "trace" else "adaptive batch"
    name = f"trace {os.path.basename(os.fspath(path))} (pollux, {len(jobs)} adaptive jobs, {kind})"
    return Workload(name, sort_jobs(jobs), notes=(
        f"adaptive jobs ({kind}): goodput from the measurements, {RESTART_SECONDS:g} s restart on every "
        "allocation change",
    ))
