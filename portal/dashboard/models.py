"""What-if simulation runs started from the simulation page.

A run is created QUEUED with its validated parameters (and, for an uploaded
trace, the trace text, so that a worker on another machine can read it), is
taken by a Celery worker (RUNNING, with progress), and ends SUCCEEDED with its
results or FAILED with a message. Only its owner and staff see it.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone


class RunState(models.TextChoices):
    QUEUED = "QUEUED"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"


#: States in which a run still occupies the queue or a worker.
ACTIVE_RUN_STATES = (RunState.QUEUED, RunState.RUNNING)


class WorkloadKind(models.TextChoices):
    SYNTHETIC = "synthetic", "synthetic workload"
    TRACE = "trace", "uploaded canonical trace"


class SimulationRun(models.Model):
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="simulation_runs")
    created_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    state = models.CharField(max_length=10, choices=RunState.choices, default=RunState.QUEUED)

    workload_kind = models.CharField(max_length=10, choices=WorkloadKind.choices)
    params = models.JSONField(
        default=dict, help_text="policies, cluster, resume_overhead and the synthetic workload's parameters"
    )
    trace_name = models.CharField(max_length=200, blank=True, default="")
    trace_text = models.TextField(blank=True, default="", help_text="The uploaded canonical trace, as validated.")
    workload_label = models.CharField(max_length=500, blank=True, default="")

    progress_done = models.PositiveBigIntegerField(default=0, help_text="Jobs simulated so far, all policies.")
    progress_total = models.PositiveBigIntegerField(default=0, help_text="Jobs x policies.")
    current_policy = models.CharField(max_length=200, blank=True, default="")
    alive_at = models.DateTimeField(null=True, blank=True, help_text="The running worker's last sign of life "
                                    "(each progress write); a run silent far longer failed (simulation.fail_stale).")

    error = models.TextField(blank=True, default="")
    results = models.JSONField(null=True, blank=True, help_text="One object per policy, as the simulator's --json.")
    figure = models.JSONField(null=True, blank=True, help_text="The comparison figure (Plotly JSON).")
    table = models.TextField(blank=True, default="", help_text="The simulator's text table.")

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["owner", "state"], name="simrun_owner_state")]
        constraints = [
            models.CheckConstraint(condition=Q(state__in=RunState.values), name="simrun_state_valid"),
            models.CheckConstraint(condition=Q(workload_kind__in=WorkloadKind.values), name="simrun_kind_valid"),
        ]

    def __str__(self) -> str:
        return f"simulation {self.pk} ({self.state})"

    @property
    def progress_fraction(self) -> float:
        if self.state == RunState.SUCCEEDED:
            return 1.0
        return min(1.0, self.progress_done / self.progress_total) if self.progress_total else 0.0

    @property
    def policies(self) -> list[str]:
        return list(self.params.get("policies", []))
