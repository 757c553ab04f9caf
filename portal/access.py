"""Revoking a user's access: sessions and API tokens.

Sessions live in the database (Django's default session engine), so ending a
user's sessions means deleting the rows whose data names that user. A revoked
token never authenticates again (``portal.api.authentication``); a deleted
session is refused by the pages, the API and the WebSocket routes alike. Live
pages already open are told to close their sockets when the revocation
commits (``realtime.publish_access_revoked``), and each consumer reads its
user afresh before every push (``current_user``), so a session that ends any
other way (password changed, expired, account deactivated in the admin) stops
receiving data at the next push, and a change of rights (staff no longer) shows
in it.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import import_module
from types import SimpleNamespace
from typing import Any

from django.conf import settings
from django.contrib.auth import SESSION_KEY, get_user, get_user_model
from django.contrib.sessions.models import Session
from django.db import transaction
from django.utils import timezone

from portal import realtime
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
        realtime.publish_access_revoked(user.pk)  # on commit: their open live pages close
    return Revoked(sessions, tokens)


def current_user(scope: dict[str, Any]):  # noqa: ANN201 - a user model instance or None
    """The WebSocket connection's user as the database has them now, or None when it may no longer be sent
    data: the session it connected with must still exist, unexpired, logged in as the same user with the
    same password, and the account must be active (what Django checks on every page request). The fresh
    row also carries the user's rights now (staff or not), which the socket's next push must follow.

    A scope without a session (a consumer mounted without the session middleware) is judged by its
    user's account alone.
    """
    user = scope.get("user")
    if user is None or not user.is_authenticated:
        return None
    session = scope.get("session")
    session_key = getattr(session, "session_key", None) if session is not None else None
    if session_key is None:
        return get_user_model()._default_manager.filter(pk=user.pk, is_active=True).first()
    store = import_module(settings.SESSION_ENGINE).SessionStore(session_key)
    current = get_user(SimpleNamespace(session=store))
    return current if current.is_authenticated and current.pk == user.pk else None

