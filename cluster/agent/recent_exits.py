"""The exits this agent reported lately, repeated in its heartbeats.

An exit report is published once (through the outbox, at least once). If it
is lost after that (a Redis restart without its append-only file) or held back
(a worker killed while handling it, the report redelivered only after the
broker's visibility timeout), the server would otherwise see only that the
heartbeats stopped listing the attempt, end it as lost and run the job again,
although it had ended, perhaps successfully. So every heartbeat also carries
the exits reported in the last ``RETENTION_S`` seconds (``exited``, the exit
reports' own fields); when the server is about to end an attempt as lost, it
ends it as the agent reported instead (cluster/liveness.py). Kept in the state
file, so an agent restart does not forget them.
"""

from __future__ import annotations

from typing import Any

RETENTION_S = 600.0
"""Seconds an exit is repeated: far longer than the server waits for a missing attempt before it
ends it as lost (twice the node-lost delay, 30 s by default), long enough to ride out a worker or
broker restart."""

MAX_KEPT = 256
"""Exits repeated at most (the newest): a heartbeat stays small on a node that runs many short jobs."""

MAX_MESSAGE_CHARS = 1000
"""An exit's ``message`` is cut to this in heartbeats (the exit report itself carries it whole)."""

FIELDS = ("job_id", "attempt", "exit_code", "signal", "ended_at", "notice_at", "checkpointed", "checkpoint_marker",
          "reason", "message", "peak_mem_bytes", "cpu_seconds")
"""The exit report's fields a heartbeat repeats: everything but the sender's node, token and version."""


class RecentExits:
    """The exits reported in the last ``RETENTION_S`` seconds, oldest first, at most ``MAX_KEPT``."""

    def __init__(self, entries: list[Any] | None = None) -> None:
        self._entries: list[tuple[float, dict[str, Any]]] = []
        for item in entries or []:
            if (isinstance(item, (list, tuple)) and len(item) == 2 and isinstance(item[0], (int, float))
                    and isinstance(item[1], dict)):
                self._entries.append((float(item[0]), dict(item[1])))

    def add(self, report: dict[str, Any], now: float) -> None:
        """Remember an exit report (its ``FIELDS``) as reported at ``now``."""
        kept = {k: report.get(k) for k in FIELDS}
        if isinstance(kept["message"], str) and len(kept["message"]) > MAX_MESSAGE_CHARS:
            kept["message"] = kept["message"][:MAX_MESSAGE_CHARS]
        self._entries.append((now, kept))
        del self._entries[:-MAX_KEPT]

    def current(self, now: float) -> list[dict[str, Any]]:
        """The exits reported since ``now - RETENTION_S`` (older ones are forgotten here)."""
        cutoff = now - RETENTION_S
        if self._entries and self._entries[0][0] < cutoff:
            self._entries = [e for e in self._entries if e[0] >= cutoff]
        return [report for _, report in self._entries]

    def to_state(self) -> list[list[Any]]:
        """For the state file: ``[[reported_at, report], ...]``."""
        return [[at, report] for at, report in self._entries]


__all__ = ["FIELDS", "MAX_KEPT", "RETENTION_S", "RecentExits"]
