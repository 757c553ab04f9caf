"""Celery tasks for the agents' REPORT_* messages: check the token, parse, call one service.

A malformed report is logged with the field at fault and dropped (raising
would only make Celery log a traceback; the agent cannot fix a message it
already sent). Unknown extra kwargs are accepted so agents may add fields.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

from celery import shared_task
from django import db
from django.utils import timezone as dj_timezone

from cluster import protocol, services
from cluster.protocol import ProtocolError

log = logging.getLogger(__name__)

_NODE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
MAX_LINES_PER_REPORT = 100_000


# A report that finds the database unreachable is retried this often, a second apart (the message
# is acknowledged before the task runs, so without a retry it would be lost: an exit never settled).
DB_RETRIES = 600
DB_RETRY_DELAY_S = 1.0


def report_task(name: str) -> Callable[[Callable[..., Any]], Any]:
    """A REPORT_* task: token checked, ProtocolError/AgentAuthError logged and dropped, retried
    while the database cannot be reached (reports are idempotent, so a retry is harmless)."""

    def wrap(fn: Callable[..., Any]) -> Any:
        def task(self: Any, **kwargs: Any) -> Any:
            node = kwargs.get("node")
            try:
                node = parse_node(node)
                services.check_token(node, kwargs.get("token", ""))
                return fn(node=node, **{k: v for k, v in kwargs.items() if k not in ("node", "token")})
            except ProtocolError as exc:
                log.error("%s from node %r dropped: %s", name, node, exc)
            except services.AgentAuthError as exc:
                log.error("%s dropped: %s", name, exc)
            except (db.OperationalError, db.InterfaceError) as exc:
                log.warning("%s from node %r: database unreachable (%s); retrying", name, node, exc)
                raise self.retry(countdown=DB_RETRY_DELAY_S, max_retries=DB_RETRIES) from None
            return None

        task.__name__, task.__qualname__, task.__doc__ = fn.__name__, fn.__qualname__, fn.__doc__
        # typing=False: unknown kwargs from newer agents must not be refused by Celery.
        return shared_task(name=name, ignore_result=True, typing=False, bind=True)(task)

    return wrap


# --- parsing ------------------------------------------------------------------


def parse_node(value: Any) -> str:
    if not isinstance(value, str) or not _NODE_RE.match(value):
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


# --- tasks ----------------------------------------------------------------------


@report_task(protocol.REPORT_REGISTER)
def register(node: str, gpus: Any = None, cpus: Any = 0.0, mem_gb: Any = 0.0, gpu_models: Any = (),
             agent_version: Any = "", **_extra: Any) -> None:
    if not isinstance(agent_version, str):
        raise ProtocolError("agent_version", f"must be a string, got {agent_version!r}")
    services.register_node(
        node,
        gpus=parse_count(gpus, "gpus"),
        cpus=parse_amount(cpus, "cpus"),
        mem_gb=parse_amount(mem_gb, "mem_gb"),
        gpu_models=parse_strings(gpu_models, "gpu_models", 4096),
        agent_version=agent_version,
        now=dj_timezone.now(),
    )


@report_task(protocol.REPORT_HEARTBEAT)
def heartbeat(node: str, running: Any = (), **_extra: Any) -> None:
    services.heartbeat(node, parse_running(running), dj_timezone.now())


@report_task(protocol.REPORT_STARTED)
def started(node: str, job_id: Any = None, attempt: Any = None, pid: Any = None, started_at: Any = None,
            **_extra: Any) -> None:
    services.attempt_started(
        node,
        parse_job_id(job_id),
        protocol.check_attempt(attempt),
        parse_optional_int(pid, "pid"),
        parse_time(started_at, "started_at"),
    )


@report_task(protocol.REPORT_EXITED)
def exited(node: str, job_id: Any = None, attempt: Any = None, exit_code: Any = None, signal: Any = None,
           ended_at: Any = None, notice_at: Any = None, checkpointed: Any = False, reason: Any = None,
           **_extra: Any) -> None:
    if not isinstance(checkpointed, bool):
        raise ProtocolError("checkpointed", f"must be true or false, got {checkpointed!r}")
    if reason is not None and not isinstance(reason, str):
        raise ProtocolError("reason", f"must be a string or null, got {reason!r}")
    services.attempt_exited(
        node,
        parse_job_id(job_id),
        protocol.check_attempt(attempt),
        exit_code=parse_optional_int(exit_code, "exit_code"),
        signal=parse_optional_int(signal, "signal"),
        ended_at=parse_time(ended_at, "ended_at"),
        notice_at=parse_time(notice_at, "notice_at", allow_none=True),
        checkpointed=checkpointed,
        reason=reason,
        now=dj_timezone.now(),
    )


@report_task(protocol.REPORT_LOG)
def log_lines(node: str, job_id: Any = None, attempt: Any = None, lines: Any = (), **_extra: Any) -> None:
    services.append_log(
        parse_job_id(job_id),
        protocol.check_attempt(attempt),
        parse_strings(lines, "lines", MAX_LINES_PER_REPORT),
        dj_timezone.now(),
        node=node,
    )
