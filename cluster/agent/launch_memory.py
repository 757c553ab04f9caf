"""Which launches this node has already seen, so that no attempt runs twice: the newest attempt of
each of the last ``MAX_REMEMBERED_JOBS`` jobs, and a floor under the time the server signed them.

A launch of an attempt not newer than the newest one seen for its job is refused (the server has
moved on, or the message is a repeat). A node forgets its oldest jobs beyond the limit, and a launch
of a forgotten job would run again if it came back: from a slow queue, or replayed from the broker by
anyone who read it there (every node can). So when a job is forgotten, the time the server signed its
launch becomes the floor: launches signed no later are refused from then on. A launch the server sent
that long ago and never heard started is re-sent by its tick, signed anew, so the floor refuses only
repeats. Unsigned launches (a development stack) have no time and are never refused by the floor.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

MAX_REMEMBERED_JOBS = 10_000


class LaunchMemory:
    """The newest attempt and its launch's signed time per job (oldest forgotten first), and the floor."""

    def __init__(self, limit: int = MAX_REMEMBERED_JOBS) -> None:
        self.limit = limit
        self.newest: dict[str, int] = {}
        self.signed: dict[str, float] = {}
        self.floor: float | None = None

    def refusal(self, job: str, attempt: int, signed_at: float | None) -> str | None:
        """Why a launch of ``attempt`` of ``job`` signed at ``signed_at`` is refused, or None if it is new."""
        newest = self.newest.get(job)
        if newest is not None and attempt <= newest:
            return f"attempt {newest} was already seen here"
        if signed_at is not None and self.floor is not None and signed_at <= self.floor:
            return (f"it was signed at {signed_at:.3f}, no later than the launch of a job this node has since "
                    f"forgotten ({self.floor:.3f}): a repeat")
        return None

    def remember(self, job: str, attempt: int, signed_at: float | None) -> None:
        """``attempt`` is the newest of ``job``; the oldest jobs beyond the limit are forgotten, raising the floor."""
        self.newest.pop(job, None)
        self.newest[job] = attempt
        self.signed.pop(job, None)
        if signed_at is not None:
            self.signed[job] = signed_at
        while len(self.newest) > self.limit:
            old = next(iter(self.newest))
            del self.newest[old]
            at = self.signed.pop(old, None)
            if at is not None and (self.floor is None or at > self.floor):
                self.floor = at

    def clear(self) -> None:
        """Forget every job (another cluster's ids mean other jobs); the floor stays, a time being a time."""
        self.newest.clear()
        self.signed.clear()

    def to_state(self) -> dict[str, Any]:
        """For the agent's state file."""
        return {"newest": dict(self.newest), "newest_signed": dict(self.signed), "launch_floor": self.floor}

    def restore(self, state: Mapping[str, Any]) -> None:
        """Take back what a previous agent saved (a state of an agent before signed times has none of them)."""
        signed = state.get("newest_signed") or {}
        for job, attempt in (state.get("newest") or {}).items():
            at = signed.get(job)
            self.remember(str(job), int(attempt), float(at) if isinstance(at, (int, float)) else None)
        floor = state.get("launch_floor")
        if isinstance(floor, (int, float)) and (self.floor is None or floor > self.floor):
            self.floor = float(floor)
