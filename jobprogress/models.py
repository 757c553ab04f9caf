"""The latest progress of an attempt and a bounded history of its steps and metrics."""

from __future__ import annotations

from django.db import models

#: Points kept per attempt; beyond it the older half is thinned (every other point dropped),
#: so a long run keeps its whole shape at a fixed size.
MAX_HISTORY_POINTS = 300


class AttemptProgress(models.Model):
    """One row per attempt that reported progress; rewritten (at most about once a second) per report.

    ``history`` is a list of ``[t, step, {metric: value}]`` points (``t``: Unix
    seconds when the job wrote the report; ``step`` may be null).
    """

    attempt = models.OneToOneField("scheduler.Attempt", on_delete=models.CASCADE, primary_key=True,
                                   related_name="progress")
    job = models.ForeignKey("scheduler.Job", on_delete=models.CASCADE, related_name="+")
    updated_at = models.DateTimeField(help_text="When the server stored the latest report.")
    reported_at = models.DateTimeField(null=True, blank=True, help_text="When the job wrote the latest report.")
    step = models.BigIntegerField(null=True, blank=True)
    total_steps = models.BigIntegerField(null=True, blank=True)
    epoch = models.FloatField(null=True, blank=True)
    metrics = models.JSONField(default=dict, blank=True)
    checkpoint = models.JSONField(null=True, blank=True)
    history = models.JSONField(default=list, blank=True)

    class Meta:
        indexes = [models.Index(fields=["job", "-attempt"], name="jobprogress_job_attempt")]

    def __str__(self) -> str:
        return f"progress of job {self.job_id} attempt {self.attempt_id}"
