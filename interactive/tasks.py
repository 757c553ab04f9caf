"""REPORT_SESSION: a node agent says where a session's server listens (authenticated like every report).

The secret comes sealed to this server's key for the reporting node, job and attempt
(``cluster.session_seal``), or in clear from an agent older than the sealing."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.utils import timezone

from cluster import protocol, session_contract, session_seal
from cluster.tasks import parse_job_id, report_task
from interactive import services


def _opener(node: str, job_id: int, attempt: int) -> Callable[[object], str | None]:
    """Opens a sealed secret of this session with ``SECRET_KEY``'s key, or one of its fallbacks'."""
    keys = (settings.SECRET_KEY, *getattr(settings, "SECRET_KEY_FALLBACKS", ()))
    ctx = session_seal.context(node, job_id, attempt)
    return lambda sealed: session_seal.open_sealed(keys, sealed, ctx)


@report_task(session_contract.REPORT_SESSION)
def session_ready(node: str, job_id: Any = None, attempt: Any = None, **fields: Any) -> bool:
    job, att = parse_job_id(job_id), protocol.check_attempt(attempt)
    host, port, secret = session_contract.check_endpoint(fields, _opener(node, job, att))
    return services.record_endpoint(node, job, att, host, port, secret, timezone.now())
