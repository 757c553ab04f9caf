"""Decoding Celery task messages (protocol 2, and 1 for old senders) into commands, and checking that
the server signed them for this node (``cluster.message_signing``)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

from cluster import message_signing
from cluster.protocol import ProtocolError


def decode_task(headers: Mapping[str, Any] | None, body: Any) -> tuple[str, dict[str, Any]]:
    """(task name, kwargs) of a Celery task message.

    Protocol 2 keeps the name in the headers and the body is
    ``[args, kwargs, embed]``; protocol 1 keeps everything in a dict body.
    Commands take keyword arguments only.
    """
    headers = headers or {}
    if "task" in headers:
        if not isinstance(body, (list, tuple)) or len(body) < 2:
            raise ProtocolError("body", "a protocol 2 task body must be [args, kwargs, embed]")
        name, args, kwargs = headers["task"], body[0], body[1]
    elif isinstance(body, Mapping) and "task" in body:
        name, args, kwargs = body["task"], body.get("args") or [], body.get("kwargs") or {}
    else:
        raise ProtocolError("task", "not a Celery task message (no task name)")
    if not isinstance(name, str):
        raise ProtocolError("task", f"must be a string, got {name!r}")
    if args:
        raise ProtocolError("args", f"{name} takes keyword arguments only")
    if not isinstance(kwargs, Mapping):
        raise ProtocolError("kwargs", f"must be an object, got {type(kwargs).__name__}")
    return name, dict(kwargs)


def expires_at(headers: Mapping[str, Any] | None, body: Any) -> datetime | None:
    """The message's ``expires`` time (timezone-aware, naive read as UTC), if any."""
    raw = (headers or {}).get("expires")
    if raw is None and isinstance(body, Mapping):
        raw = body.get("expires")
    if not raw:
        return None
    try:
        when = datetime.fromisoformat(raw)
    except (TypeError, ValueError):
        raise ProtocolError("expires", f"not an ISO 8601 time: {raw!r}") from None
    return when if when.tzinfo else when.replace(tzinfo=timezone.utc)


def is_expired(headers: Mapping[str, Any] | None, body: Any, now: datetime | None = None) -> bool:
    """True if the sender set ``expires`` and it has passed."""
    when = expires_at(headers, body)
    return when is not None and when <= (now or datetime.now(timezone.utc))


def check_signed(token: str, task: str, kwargs: Mapping[str, Any]) -> None:
    """Raise ProtocolError unless the command is signed with this node's ``token`` (an agent without a
    token, in a development stack, takes unsigned commands). Anyone holding the broker's password can
    write into this node's queue; only the server, which derives the node's token, can sign for it."""
    if token and not message_signing.verifies(token, task, kwargs):
        what = "carries no signature" if message_signing.SIGNATURE_FIELD not in kwargs else "has a signature that " \
            "does not verify with this node's token"
        raise ProtocolError("signature", f"{task} {what}: not sent by this node's server (or altered on the way); "
                                         "not run")


def signed_time(kwargs: Mapping[str, Any]) -> float | None:
    """When the server signed a command (its clock), or None for an unsigned one."""
    at = kwargs.get(message_signing.SIGNED_AT_FIELD)
    signed = message_signing.SIGNATURE_FIELD in kwargs
    return float(at) if signed and isinstance(at, (int, float)) and not isinstance(at, bool) and math.isfinite(at) else None


def ordered_before(ordered_at: float | None, command: Mapping[str, Any]) -> bool:
    """Whether something the server ordered at ``ordered_at`` (a launch's ``signed_time``) came before
    ``command`` was signed; True when either time is unknown. AGENT_RECONCILE stops only what was
    launched before it: its ``keep`` list says nothing of later launches, and a reconcile replayed
    from the broker, or delivered late, must not stop them."""
    at = signed_time(command)
    return ordered_at is None or at is None or ordered_at < at
