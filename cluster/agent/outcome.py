"""How an ended attempt is reported: exit code, signal, reason and ``checkpointed``.

Pure functions of the attempt's record and the shim's exit file, so the rules
of docs/agent.md ("Exit status and checkpointed") are tested without processes.
"""

from __future__ import annotations

import signal
from typing import Any

from cluster import protocol
from cluster.agent.attempt import TrackedAttempt

Outcome = tuple[int | None, int | None, str | None]


def outcome(att: TrackedAttempt, record: dict[str, Any] | None) -> Outcome:
    """(exit_code, signal, reason) of an ended attempt, from the shim's exit ``record`` (None: none written)."""
    reason = att.reason
    if record and record.get("fenced"):
        # The job stopped itself because this agent was gone too long: the server has
        # (or will have) declared the node lost, so the attempt counts as lost, not failed.
        main = record.get("main") or {}
        return main.get("exit_code"), main.get("signal"), protocol.EXIT_LOST
    main = record.get("main") if record else None
    if main:
        last = record.get("last") or main
        if att.notice_at is not None and main.get("signal") is not None:
            # The wrapping shell died of the notice; the job's own exit is
            # that of its last process, unless we had to SIGKILL it.
            if record.get("done") and last.get("exit_code") is not None:
                return last["exit_code"], None, reason
            if att.killed_at is not None:
                return None, signal.SIGKILL, reason
        return main.get("exit_code"), main.get("signal"), reason
    status = att.handle.wait_status() if att.handle is not None else None
    if status is not None and status < 0:
        return None, -status, reason
    if att.killed_at is not None:
        return None, signal.SIGKILL, reason
    return None, None, reason or protocol.EXIT_LOST


def wrote_marker(att: TrackedAttempt, marker_now: list[int] | None) -> bool:
    """True when the attempt wrote (or replaced) the checkpoint marker: its identity differs from before the launch."""
    return marker_now is not None and marker_now != att.marker_before


def checkpointed(att: TrackedAttempt, exit_code: int | None, marker_now: list[int] | None) -> bool:
    """True when the attempt wrote (or replaced) the marker, or exited by itself after a notice before SIGKILL."""
    exited_cleanly = att.notice_at is not None and att.killed_at is None and exit_code is not None
    return bool(wrote_marker(att, marker_now) or exited_cleanly)


def ended_at(record: dict[str, Any] | None, now: float) -> float:
    """When the last process of the attempt ended: the shim's record, else the command's end, else ``now``."""
    record = record or {}
    return record.get("ended_at") or (record.get("main") or {}).get("at") or now
