"""Where a session's server listens and the secret it requires: server-side only, never shown."""

from __future__ import annotations

from django.db import models

from interactive.sealed import SealedCharField


class SessionKind(models.TextChoices):
    JUPYTER = "jupyter", "JupyterLab notebook"
    TERMINAL = "terminal", "Terminal"


class SessionEndpoint(models.Model):
    """The session server of a job's current attempt, as its node reported it (REPORT_SESSION).

    ``secret`` is what the portal sends as ``Authorization: token <secret>``; no
    page, API answer or log line carries it, and the database holds it sealed
    (``interactive.sealed``: AES-GCM under a key derived from ``SECRET_KEY``). ``attempt`` is the attempt the
    address belongs to: a later attempt's server gets a new port and secret.
    ``last_activity_at`` is the last request the portal forwarded (written at
    most once per ``ACTIVITY_RESOLUTION_S``).
    """

    job = models.OneToOneField("scheduler.Job", on_delete=models.CASCADE, primary_key=True, related_name="endpoint")
    attempt = models.PositiveIntegerField()
    node = models.CharField(max_length=63)
    host = models.CharField(max_length=253)
    port = models.PositiveIntegerField()
    secret = SealedCharField(max_length=256)  # a sealed secret of up to 128 characters is 211
    ready_at = models.DateTimeField()
    last_activity_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"session endpoint of job {self.job_id} attempt {self.attempt}"
