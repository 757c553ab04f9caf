"""Users' notification choices, their webhooks, and the log of every delivery."""

from __future__ import annotations

import secrets

from django.conf import settings
from django.db import models

from notifications.events import DEFAULT_EMAIL_KINDS


def _default_email_kinds() -> list[str]:
    return list(DEFAULT_EMAIL_KINDS)


def new_secret() -> str:
    return secrets.token_hex(32)


class Preference(models.Model):
    """A user's default: which events notify them by email and by their webhooks."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="notify_preference")
    email_events = models.JSONField(default=_default_email_kinds, blank=True)
    webhook_events = models.JSONField(default=list, blank=True)

    def __str__(self) -> str:
        return f"notification defaults of {self.user}"


class JobPreference(models.Model):
    """One job's choices, replacing its owner's default for that job."""

    job = models.OneToOneField("scheduler.Job", on_delete=models.CASCADE, related_name="notify_preference")
    email_events = models.JSONField(default=list, blank=True)
    webhook_events = models.JSONField(default=list, blank=True)

    def __str__(self) -> str:
        return f"notifications of job {self.job_id}"


class Webhook(models.Model):
    """A URL that receives a signed JSON POST for each chosen event of its owner's jobs or, with a
    ``project``, of every job charged to that project (the events in ``events``; set up by staff)."""

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="webhooks")
    project = models.ForeignKey("scheduler.Project", on_delete=models.CASCADE, null=True, blank=True,
                                related_name="webhooks",
                                help_text="A project's webhook: every job charged to it (empty: the owner's jobs).")
    events = models.JSONField(default=list, blank=True,
                              help_text="A project's webhook only: the events it receives (a user's webhooks follow "
                                        "the user's choices).")
    url = models.URLField(max_length=500)
    secret = models.CharField(max_length=64, default=new_secret,
                              help_text="HMAC-SHA256 key of the X-Gpusched-Signature header.")
    active = models.BooleanField(default=True)
    allow_private = models.BooleanField(
        default=False, help_text="Set by an administrator only: allow a URL that resolves to a private, loopback, "
                                 "link-local or reserved address (an internal service you trust).")
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"{self.url} ({self.project or self.owner})"

    def clean(self) -> None:
        """Events: known names only, in canonical order, and only on a project's webhook."""
        from django.core.exceptions import ValidationError

        from notifications.events import clean_kinds

        try:
            self.events = clean_kinds(self.events)
        except ValueError as exc:
            raise ValidationError({"events": str(exc)}) from None
        if self.events and self.project_id is None:
            raise ValidationError({"events": "only a project's webhook chooses its events; "
                                             "a user's webhooks follow the user's choices"})


class Delivery(models.Model):
    """One notification sent (or tried) by email or to a webhook; visible to its owner."""

    class Channel(models.TextChoices):
        EMAIL = "email"
        WEBHOOK = "webhook"

    class Status(models.TextChoices):
        PENDING = "pending"
        DELIVERED = "delivered"
        RETRYING = "retrying"
        FAILED = "failed"
        REFUSED = "refused"

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="deliveries")
    channel = models.CharField(max_length=8, choices=Channel.choices)
    webhook = models.ForeignKey(Webhook, on_delete=models.SET_NULL, null=True, blank=True, related_name="deliveries")
    job = models.ForeignKey("scheduler.Job", on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    event = models.CharField(max_length=16)
    target = models.CharField(max_length=500, help_text="The address or URL it went to.")
    body = models.TextField(blank=True)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    response_code = models.PositiveIntegerField(null=True, blank=True)
    error = models.CharField(max_length=500, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        indexes = [models.Index(fields=["owner", "-created_at"], name="notify_delivery_owner")]
        verbose_name_plural = "deliveries"

    def __str__(self) -> str:
        return f"{self.channel} {self.event} of job {self.job_id} -> {self.target}: {self.status}"
