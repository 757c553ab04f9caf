"""The fields of agents' reports, checked: each parser returns the value or raises
``protocol.ProtocolError`` naming the field (the report is then dropped, its sender logged).

The exits a heartbeat repeats are the exception: a malformed entry is left out with a warning,
since the heartbeat is what keeps its node alive (``parse_reported_exits``).
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

from cluster import protocol
from cluster.protocol import ProtocolError

log = logging.getLogger(__name__)

_NODE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")


def parse_node(value: Any) -> str:
    if not isinstance(value, str) or not _NODE_RE.fullmatch(value):
        raise ProtocolError("node", f"must be a node name (1-63 of A-Z a-z 0-9 . _ -), got {value!r}")
    return value


def parse_job_id(value: Any, field: str = "job_id") -> int:
    """Job ids sent by this server are integers; an agent may echo them as digit strings."""
    checked = protocol.check_job_id(value, field)
    if isinstance(checked, str):
        if not checked.isdigit():
            raise ProtocolError(field, f"{checked!r} is not a job id of this server")
        return int(checked)
    return checked


def parse_time(value: Any, field: str, *, allow_none: bool = False) -> datetime | None:
    seconds = protocol.check_seconds(value, field, allow_none=allow_none)
    return None if seconds is None else datetime.fromtimestamp(seconds, tz=timezone.utc)


def parse_optional_int(value: Any, field: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ProtocolError(field, f"must be an integer or null, got {value!r}")
    return value


def parse_count(value: Any, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ProtocolError(field, f"must be an integer >= 0, got {value!r}")
    return value


def parse_amount(value: Any, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ProtocolError(field, f"must be a number >= 0, got {value!r}")
    return float(value)


def parse_strings(value: Any, field: str, limit: int) -> list[str]:
    if not isinstance(value, (list, tuple)):
        raise ProtocolError(field, f"must be a list of strings, got {type(value).__name__}")
    if len(value) > limit:
        raise ProtocolError(field, f"has {len(value)} items, at most {limit} are accepted")
    for i, item in enumerate(value):
        if not isinstance(item, str):
            raise ProtocolError(f"{field}[{i}]", f"must be a string, got {item!r}")
    return list(value)


def parse_running(value: Any) -> list[tuple[int, int]]:
    keep = protocol.check_keep(value)
    return [(parse_job_id(job, "running"), attempt) for job, attempt in keep]


def parse_exit(report: Mapping[str, Any]) -> tuple[int, int, dict[str, Any]]:
    """``(job_id, attempt, outcome)`` of an exit report's fields, ``outcome`` being
    ``reports.attempt_exited``'s keyword arguments but ``now``; raises ProtocolError naming the field."""
    checkpointed, reason, message = report.get("checkpointed", False), report.get("reason"), report.get("message", "")
    peak_mem_bytes, cpu_seconds = report.get("peak_mem_bytes"), report.get("cpu_seconds")
    if not isinstance(checkpointed, bool):
        raise ProtocolError("checkpointed", f"must be true or false, got {checkpointed!r}")
    marker = report.get("checkpoint_marker")  # absent from agents before it: None, unknown
    if marker is not None and not isinstance(marker, bool):
        raise ProtocolError("checkpoint_marker", f"must be true, false or null, got {marker!r}")
    if reason is not None and not isinstance(reason, str):
        raise ProtocolError("reason", f"must be a string or null, got {reason!r}")
    if not isinstance(message, str):
        raise ProtocolError("message", f"must be a string, got {message!r}")
    return parse_job_id(report.get("job_id")), protocol.check_attempt(report.get("attempt")), {
        "exit_code": parse_optional_int(report.get("exit_code"), "exit_code"),
        "signal": parse_optional_int(report.get("signal"), "signal"),
        "ended_at": parse_time(report.get("ended_at"), "ended_at"),
        "notice_at": parse_time(report.get("notice_at"), "notice_at", allow_none=True),
        "checkpointed": checkpointed,
        "checkpoint_marker": marker,
        "reason": reason,
        "message": message.replace("\x00", ""),
        "peak_mem_bytes": None if peak_mem_bytes is None else parse_count(peak_mem_bytes, "peak_mem_bytes"),
        "cpu_seconds": None if cpu_seconds is None else parse_amount(cpu_seconds, "cpu_seconds"),
    }


#: Exits one heartbeat may repeat (the agent sends at most its recent_exits.MAX_KEPT).
MAX_REPORTED_EXITS = 1024


def parse_reported_exits(node: str, value: Any) -> dict[tuple[int, int], dict[str, Any]]:
    """The exits a heartbeat repeats (``exited``, cluster/agent/recent_exits.py), by ``(job_id, attempt)``.

    A malformed entry is logged with its index and field and left out, not the heartbeat refused: a
    heartbeat is what keeps the node alive, and without the entry the attempt is only ended as lost,
    as before agents repeated exits."""
    if not value:
        return {}
    if not isinstance(value, (list, tuple)):
        log.warning("heartbeat from node %s: exited must be a list, got %s; ignored", node, type(value).__name__)
        return {}
    if len(value) > MAX_REPORTED_EXITS:
        log.warning("heartbeat from node %s: exited has %d entries; only the last %d are read", node, len(value),
                    MAX_REPORTED_EXITS)
        value = value[-MAX_REPORTED_EXITS:]
    found: dict[tuple[int, int], dict[str, Any]] = {}
    for i, item in enumerate(value):
        if not isinstance(item, Mapping):
            log.warning("heartbeat from node %s: exited[%d] must be an object, got %s; that entry is ignored", node, i,
                        type(item).__name__)
            continue
        try:
            job, number, outcome = parse_exit(item)
        except ProtocolError as exc:
            log.warning("heartbeat from node %s: exited[%d].%s; that entry is ignored", node, i, exc)
            continue
        found[(job, number)] = outcome
    return found


def reported_exit_ids(value: Any) -> list[int]:
    """The integer job ids of a heartbeat's repeated exits, malformed entries left out silently
    (``parse_reported_exits`` logs them when the exits are read)."""
    if not isinstance(value, (list, tuple)):
        return []
    ids = []
    for item in value[-MAX_REPORTED_EXITS:]:
        if isinstance(item, Mapping):
            try:
                ids.append(parse_job_id(item.get("job_id")))
            except ProtocolError:
                continue
    return ids
