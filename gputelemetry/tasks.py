"""REPORT_TELEMETRY: a node agent's GPU telemetry (authenticated and version-checked like every report)."""

from __future__ import annotations

from typing import Any

from cluster import protocol, telemetry_schema
from cluster.tasks import report_task
from gputelemetry import services


@report_task(protocol.REPORT_TELEMETRY)
def telemetry(node: str, sampled_at: Any = None, gpus: Any = (), jobs: Any = (), **_extra: Any) -> None:
    # Fields a newer agent adds are ignored; a report failing the check is logged naming the field, and dropped.
    services.ingest(node, telemetry_schema.check_report(sampled_at, gpus, jobs))
