"""The audit log: one append-only row per privileged action.

Who (the user, or the node for an agent), when, from where (the client's IP
address; empty for agents, which talk through the broker), what (an action
code, the object) and what changed (``{field: [before, after]}`` for the
changed fields only). Rows are never changed or deleted through the ORM: a
second ``save`` of a row, ``delete`` and queryset ``update``/``delete`` raise
``AuditLogIsAppendOnly``.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone


class AuditLogIsAppendOnly(Exception):
    """An attempt to change or delete an audit row."""


class Action(models.TextChoices):
    QUOTA_CHANGED = "quota.changed"
    QUOTA_DELETED = "quota.deleted"
    IMAGE_CHANGED = "image.changed"
    IMAGE_DELETED = "image.deleted"
    IDENTITY_CHANGED = "identity.changed"
    IDENTITY_DELETED = "identity.deleted"
    PROJECT_CHANGED = "project.changed"
    PROJECT_DELETED = "project.deleted"
    JOB_CANCELLED_BY_STAFF = "job.cancelled-by-staff"
    JOB_HELD_BY_STAFF = "job.held-by-staff"
    JOB_RELEASED_BY_STAFF = "job.released-by-staff"
    JOB_PRIORITY_BY_STAFF = "job.priority-by-staff"
    AGENT_REGISTERED = "agent.registered"
    AGENT_REFUSED = "agent.refused"
    TASK_REFUSED = "task.refused"
    SESSION_OPENED_BY_STAFF = "session.opened-by-staff"
    GPU_RETURNED = "gpu.returned-to-service"
    GPU_POLICY_CHANGED = "gpupolicy.changed"
    GPU_POLICY_DELETED = "gpupolicy.deleted"


class AppendOnlyQuerySet(models.QuerySet):
    def update(self, **kwargs):  # noqa: ANN003, ANN201
        raise AuditLogIsAppendOnly("audit rows are never updated")

    def delete(self):  # noqa: ANN201
        raise AuditLogIsAppendOnly("audit rows are never deleted")


class AuditEntry(models.Model):
    at = models.DateTimeField(default=timezone.now, db_index=True)
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                              related_name="+", help_text="The user who acted; empty for an agent.")
    actor_name = models.CharField(max_length=150, help_text="Username, or 'node <name>' for an agent (kept "
                                                            "when the user is deleted).")
    ip = models.GenericIPAddressField(null=True, blank=True, help_text="Client address; empty for agents.")
    action = models.CharField(max_length=32, choices=Action.choices, db_index=True)
    target = models.CharField(max_length=200, help_text="What the action was about.")
    changes = models.JSONField(default=dict, blank=True, help_text="{field: [before, after]} of changed fields.")
    detail = models.CharField(max_length=500, blank=True, default="")

    objects = AppendOnlyQuerySet.as_manager()

    class Meta:
        ordering = ["-at", "-id"]
        verbose_name = "audit log entry"
        verbose_name_plural = "audit log"

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M:%S} {self.actor_name} {self.action} {self.target}"

    def save(self, *args, **kwargs) -> None:  # noqa: ANN002, ANN003
        if self.pk is not None:
            raise AuditLogIsAppendOnly("audit rows are never updated")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):  # noqa: ANN002, ANN003, ANN201
        raise AuditLogIsAppendOnly("audit rows are never deleted")
