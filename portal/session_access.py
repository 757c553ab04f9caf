"""Who may reach a session through the portal (``interactive.selectors.target``), with staff access audited.

Runs in a worker thread (``database_sync_to_async``) from the proxy. A staff
member opening another user's session (allowed only by
``GPUSCHED_SESSION_STAFF_ACCESS``) is written to the audit log once per hour
per session, not once per request (a notebook makes hundreds).
"""

from __future__ import annotations

from datetime import timedelta
from types import SimpleNamespace
from typing import Any

from django.utils import timezone

from audit import services as audit
from audit.models import Action, AuditEntry
from interactive import selectors, services
from interactive.selectors import Target

AUDIT_EVERY = timedelta(hours=1)


def open_target(user: Any, job_id: int, client: str | None = None) -> Target | None:
    """The session of ``job_id`` if ``user`` may reach it (activity noted, staff access audited), else None."""
    found = selectors.target(user, job_id)
    if found is None:
        return None
    now = timezone.now()
    if found.by_staff:
        where = f"session of job {job_id} of {found.owner}"
        recent = AuditEntry.objects.filter(action=Action.SESSION_OPENED_BY_STAFF, actor=user, target=where,
                                           at__gte=now - AUDIT_EVERY).exists()
        if not recent:
            # The proxy has no HttpRequest; the audit log reads the client's address from META.
            origin = SimpleNamespace(META={"REMOTE_ADDR": client or ""})
            audit.record(Action.SESSION_OPENED_BY_STAFF, target=where, actor=user, request=origin,  # type: ignore[arg-type]
                         detail="staff access to another user's interactive session")
    services.touch(job_id, now)
    return found
