"""Writing the audit log: ``record`` one action; ``changed_fields`` and ``client_ip`` help callers."""

from __future__ import annotations

import logging
from typing import Any

from django.forms.models import model_to_dict
from django.http import HttpRequest

from audit.models import AuditEntry

log = logging.getLogger(__name__)


def client_ip(request: HttpRequest | None) -> str | None:
    """The address the request came from (REMOTE_ADDR; a proxy must set it, see docs/operations.md)."""
    return (request.META.get("REMOTE_ADDR") or None) if request is not None else None


#: Bookkeeping fields that change with every save and say nothing about what an admin changed.
_NOT_COMPARED = frozenset({"id", "updated_at"})


def snapshot(obj: Any) -> dict[str, Any]:
    """The model instance's field values, JSON-ready (foreign keys as ids, other values as text)."""
    if obj is None:
        return {}
    return {k: v if isinstance(v, (str, int, float, bool, type(None))) else str(v)
            for k, v in model_to_dict(obj).items() if k not in _NOT_COMPARED}


def changed_fields(before: dict[str, Any], after: dict[str, Any]) -> dict[str, list[Any]]:
    """``{field: [before, after]}`` for the fields whose values differ."""
    return {k: [before.get(k), after.get(k)] for k in sorted(set(before) | set(after)) if before.get(k) != after.get(k)}


def record(action: str, *, target: str, actor: Any = None, actor_name: str = "", request: HttpRequest | None = None,
           changes: dict[str, list[Any]] | None = None, detail: str = "") -> AuditEntry:
    """Append one entry; ``actor`` (a user) or ``actor_name`` (e.g. ``node gpu-07``) says who."""
    name = actor_name or (actor.get_username() if actor is not None else "")
    entry = AuditEntry.objects.create(actor=actor if actor is not None and actor.pk else None, actor_name=name[:150],
                                      ip=client_ip(request), action=action, target=target[:200],
                                      changes=changes or {}, detail=detail[:500])
    log.info("audit: %s %s %s %s", name, action, target, changes or detail)
    return entry


def record_staff_hold(request: HttpRequest, job: Any, change: str) -> None:
    """Staff holding or releasing another user's job (``change``: ``hold_job`` or ``release_job``) is audited."""
    if request.user.pk != job.owner_id:
        action = "held" if change == "hold_job" else "released"
        record(f"job.{action}-by-staff", target=f"job {job.pk} of {job.owner.get_username()}", actor=request.user,
               request=request, detail=f"hold now {job.hold or 'none'}")


def record_staff_priority(request: HttpRequest, job: Any) -> None:
    """Staff changing another user's job's priority is audited."""
    if request.user.pk != job.owner_id:
        record("job.priority-by-staff", target=f"job {job.pk} of {job.owner.get_username()}", actor=request.user,
               request=request, detail=f"priority now {job.priority}")


def record_staff_cancel(request: HttpRequest, job: Any) -> None:
    """Staff cancelling another user's job is audited; an owner cancelling their own is not."""
    if request.user.pk != job.owner_id:
        record("job.cancelled-by-staff", target=f"job {job.pk} of {job.owner.get_username()}", actor=request.user,
               request=request, detail=f"state now {job.state}")
