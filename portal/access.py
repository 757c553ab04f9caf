"""Revoking a user's access: sessions and API tokens.

Sessions live in the database (Django's default session engine), so ending a
user's sessions means deleting the rows whose data names that user. A revoked
token never authenticates again (``portal.api.authentication``); a deleted
session is refused by the pages, the API and the WebSocket routes alike.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib.auth import SESSION_KEY
from django.contrib.sessions.models import Session
from django.db import transaction
from django.utils import timezone

from portal.models import ApiToken


@dataclass(frozen=True, slots=True)
class Revoked:
    sessions: int
    tokens: int


def user_sessions(user) -> list[str]:  # noqa: ANN001 - a user model instance
    """Keys of the unexpired sessions logged in as ``user`` (reads every live session: an admin action)."""
    keys = []
    for session in Session.objects.filter(expire_date__gt=timezone.now()).iterator():
        if str(session.get_decoded().get(SESSION_KEY)) == str(user.pk):
            keys.append(session.session_key)
    return keys


def revoke_access(user, *, deactivate: bool = False) -> Revoked:  # noqa: ANN001
    """End every session of ``user`` and revoke every active token; optionally deactivate the account."""
    with transaction.atomic():
        if deactivate and user.is_active:
            user.is_active = False
            user.save(update_fields=["is_active"])
        sessions = Session.objects.filter(session_key__in=user_sessions(user)).delete()[0]
        tokens = ApiToken.objects.filter(user=user, revoked__isnull=True).update(revoked=timezone.now())
    return Revoked(sessions, tokens)
