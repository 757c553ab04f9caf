"""REPORT_SESSION: a node agent says where a session's server listens (authenticated like every report)."""

from __future__ import annotations

from typing import Any

from django.utils import timezone

from cluster import protocol, session_contract
from cluster.tasks import parse_job_id, report_task
from interactive import services


@report_task(session_contract.REPORT_SESSION)
def session_ready(node: str, job_id: Any = None, attempt: Any = None, **fields: Any) -> bool:
    host, port, secret = session_contract.check_endpoint(fields)
    return services.record_endpoint(node, parse_job_id(job_id), protocol.check_attempt(attempt), host, port, secret,
                                    timezone.now())
