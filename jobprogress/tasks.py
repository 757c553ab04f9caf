"""REPORT_PROGRESS: a node agent's relay of a job's progress report (authenticated like every report)."""

from __future__ import annotations

from typing import Any

from django.utils import timezone

from cluster import progress_schema, protocol
from cluster.tasks import parse_job_id, report_task
from jobprogress import services


@report_task(protocol.REPORT_PROGRESS)
def progress(node: str, job_id: Any = None, attempt: Any = None, **fields: Any) -> None:
    # Fields a newer agent adds are ignored; the known ones are checked again here.
    report = progress_schema.check_report({k: v for k, v in fields.items() if k in progress_schema.FIELDS})
    services.record_progress(parse_job_id(job_id), protocol.check_attempt(attempt), report, timezone.now(), node=node)
