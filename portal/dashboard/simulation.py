"""What-if simulation runs: create (validated request -> QUEUED row -> Celery task) and execute.

The simulator itself is ``scheduler.sim`` (no Django); this module only stores
the request, runs ``run_all`` in a worker with a progress callback that writes
the progress to the run's row (throttled), and stores the results, the
comparison figure and the text table. The page polls the row; the downloads
are built from it (``portal.dashboard.report``).
"""

from __future__ import annotations

import io
import logging
import time
from dataclasses import dataclass, field
from datetime import timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from portal.dashboard.models import ACTIVE_RUN_STATES, RunState, SimulationRun, WorkloadKind

logger = logging.getLogger(__name__)

RUN_TASK = "dashboard.run_simulation"
#: Seconds between two progress writes of one run.
PROGRESS_WRITE_INTERVAL_S = 0.5
#: A RUNNING run whose worker has written no progress for this long has lost its worker (killed, out of
#: memory, its machine gone): a run writes progress at least every few seconds, the whole Philly trace
#: under the slowest policy included.
STALE_AFTER_S = 300.0


class TooManyRuns(Exception):
    """The user already has ``SIMULATION_MAX_ACTIVE_RUNS`` runs queued or running."""


@dataclass(frozen=True)
class SimulationRequest:
    """A validated request (the form checks every field; see ``forms.SimulationForm``)."""

    policies: list[str]
    nodes: int
    gpus_per_node: int
    resume_overhead: float
    workload_kind: str
    synthetic: dict = field(default_factory=dict)
    trace_name: str = ""
    trace_text: str = ""

    def params(self) -> dict:
        return {
            "policies": list(self.policies),
            "cluster": f"{self.nodes}x{self.gpus_per_node}",
            "resume_overhead": self.resume_overhead,
            **({"synthetic": dict(self.synthetic)} if self.workload_kind == WorkloadKind.SYNTHETIC else {}),
        }


def create_run(owner, request: SimulationRequest) -> SimulationRun:  # noqa: ANN001 - a user model instance
    """Store a QUEUED run and enqueue its task once the row is committed.

    Raises ``TooManyRuns`` when the owner has too many unfinished runs.
    """
    with transaction.atomic():
        # Lock the owner's row so that two concurrent submissions cannot both pass the limit.
        get_user_model().objects.select_for_update().filter(pk=owner.pk).first()
        fail_stale(timezone.now())  # a run whose worker died must not hold the owner's place forever
        active = SimulationRun.objects.filter(owner=owner, state__in=ACTIVE_RUN_STATES).count()
        if active >= settings.SIMULATION_MAX_ACTIVE_RUNS:
            raise TooManyRuns(
                f"You already have {active} simulation(s) queued or running; "
                f"the limit is {settings.SIMULATION_MAX_ACTIVE_RUNS}. Wait for one to finish."
            )
        run = SimulationRun.objects.create(
            owner=owner,
            workload_kind=request.workload_kind,
            params=request.params(),
            trace_name=request.trace_name,
            trace_text=request.trace_text,
        )
        transaction.on_commit(lambda: enqueue(run.pk))
    return run


def fail_stale(now) -> int:  # noqa: ANN001 - a datetime
    """Mark FAILED every RUNNING run silent for ``STALE_AFTER_S`` (its worker is gone; nothing else would ever
    end it: a task is taken off the queue when it starts); returns how many. Called where runs are counted
    or shown, so no periodic task is needed."""
    limit = now - timedelta(seconds=STALE_AFTER_S)
    silent = Q(alive_at__lt=limit) | Q(alive_at__isnull=True, started_at__lt=limit)
    failed = SimulationRun.objects.filter(silent, state=RunState.RUNNING).update(
        state=RunState.FAILED, finished_at=now,
        error=f"The worker running this simulation stopped (no progress for {STALE_AFTER_S / 60:.0f} min); "
              "start it again.")
    if failed:
        logger.warning("%d simulation run(s) failed: their worker stopped", failed)
    return failed


def enqueue(run_id: int) -> bool:
    """Send the run's task; a broker that is down leaves the run QUEUED and logs why."""
    from portal.celery import app

    try:
        app.send_task(RUN_TASK, args=[run_id], queue=settings.SIMULATION_QUEUE, retry=True,
                      retry_policy={"max_retries": 2, "interval_start": 0, "interval_step": 0.2, "interval_max": 0.5})
    except Exception:
        logger.warning("could not enqueue simulation %s", run_id, exc_info=True)
        SimulationRun.objects.filter(pk=run_id, state=RunState.QUEUED).update(
            state=RunState.FAILED, finished_at=timezone.now(),
            error="The task queue could not be reached; start the run again later.",
        )
        return False
    return True


def build_workload(run: SimulationRun):  # noqa: ANN201 - scheduler.sim Workload
    """The run's workload: generated, or parsed from the stored trace text."""
    from scheduler.sim.cluster import parse_cluster
    from scheduler.sim.workloads import SyntheticConfig, generate, parse_canonical

    if run.workload_kind == WorkloadKind.SYNTHETIC:
        nodes, gpus = parse_cluster(run.params["cluster"])
        return generate(SyntheticConfig(nodes=nodes, gpus_per_node=gpus, **run.params.get("synthetic", {})))
    return parse_canonical(io.StringIO(run.trace_text, newline=""), source=run.trace_name or "upload.csv")


class _Progress:
    """Progress callback for ``run_all``: jobs done over all policies, written at most every 0.5 s."""

    def __init__(self, run_id: int, jobs: int, policies: list[str]) -> None:
        self.run_id = run_id
        self.jobs = jobs
        self.policies = policies
        self.last_write = 0.0

    def for_policy(self, label: str):  # noqa: ANN201
        index = self.policies.index(label) if label in self.policies else 0

        def callback(done: int, total: int) -> None:
            now = time.monotonic()
            if done < total and now - self.last_write < PROGRESS_WRITE_INTERVAL_S:
                return
            self.last_write = now
            SimulationRun.objects.filter(pk=self.run_id, state=RunState.RUNNING).update(
                progress_done=index * self.jobs + done, current_policy=label, alive_at=timezone.now()
            )

        self.write(index * self.jobs, label)
        return callback

    def write(self, done: int, label: str) -> None:
        self.last_write = time.monotonic()
        SimulationRun.objects.filter(pk=self.run_id, state=RunState.RUNNING).update(
            progress_done=done, current_policy=label, alive_at=timezone.now()
        )


def execute_run(run_id: int) -> RunState | None:
    """Run a QUEUED simulation to the end; returns its final state, or None if it was not QUEUED.

    Only the worker that moves the row from QUEUED to RUNNING runs it, so a
    task delivered twice simulates once.
    """
    from scheduler.sim.cluster import make_nodes, parse_cluster
    from scheduler.sim.engine import SimConfig
    from scheduler.sim.runner import parse_policy_spec, run_all

    started = timezone.now()
    if not SimulationRun.objects.filter(pk=run_id, state=RunState.QUEUED).update(
        state=RunState.RUNNING, started_at=started, alive_at=started
    ):
        return None
    run = SimulationRun.objects.get(pk=run_id)
    try:
        workload = build_workload(run)
        nodes_n, gpus = parse_cluster(run.params["cluster"])
        nodes = make_nodes(nodes_n, gpus)
        specs = [parse_policy_spec(p) for p in run.policies]
        progress = _Progress(run.pk, len(workload.jobs), [s.label for s in specs])
        SimulationRun.objects.filter(pk=run.pk).update(
            progress_total=len(workload.jobs) * len(specs), workload_label=_label(workload)[:500]
        )
        config = SimConfig(resume_overhead=float(run.params.get("resume_overhead", SimConfig().resume_overhead)))
        runs = run_all(specs, workload, nodes, config, progress.for_policy)
        results, figure, table = summarize(runs)
    except Exception as exc:  # a policy bug or a bad stored request: the run fails with the reason
        logger.exception("simulation %s failed", run_id)
        SimulationRun.objects.filter(pk=run_id, state=RunState.RUNNING).update(
            state=RunState.FAILED, finished_at=timezone.now(), error=f"{type(exc).__name__}: {exc}"[:5000]
        )
        return RunState.FAILED
    # Conditional: a run declared stale while this worker was away keeps that verdict.
    if not SimulationRun.objects.filter(pk=run_id, state=RunState.RUNNING).update(
        state=RunState.SUCCEEDED, finished_at=timezone.now(), results=results, figure=figure, table=table,
        progress_done=len(workload.jobs) * len(specs),
    ):
        return None
    return RunState.SUCCEEDED


def _label(workload) -> str:  # noqa: ANN001
    return " | ".join((workload.name, *workload.notes))


def summarize(runs) -> tuple[list[dict], dict, str]:  # noqa: ANN001
    """The CLI's JSON objects, the comparison figure (Plotly JSON) and the text table."""
    import json

    from scheduler.sim.report import build_figure
    from scheduler.sim.table import change_table, results_table

    results = [r.to_json() for r in runs]
    figure = json.loads(build_figure(runs).to_json())
    table = results_table(runs)
    if len(runs) > 1:
        baseline = next((r for r in runs if r.policy == "fifo"), runs[0])
        table += "\n\n" + change_table(runs, baseline)
    return results, figure, table
