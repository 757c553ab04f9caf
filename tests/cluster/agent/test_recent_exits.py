"""The exits an agent repeats in its heartbeats: what is kept, for how long, and across a restart."""

from __future__ import annotations

from cluster.agent import recent_exits
from cluster.agent.recent_exits import FIELDS, MAX_KEPT, RETENTION_S, RecentExits


def _report(job: str, attempt: int = 1, **fields: object) -> dict[str, object]:
    return {"node": "n1", "token": "secret", "protocol_version": 2, "job_id": job, "attempt": attempt,
            "exit_code": 0, "signal": None, "ended_at": 100.0, "notice_at": None, "checkpointed": False,
            "checkpoint_marker": False, "reason": None, "message": "", "peak_mem_bytes": 5, "cpu_seconds": 1.5, **fields}


def test_an_exit_is_repeated_with_the_reports_fields_but_not_the_senders_secret() -> None:
    kept = RecentExits()
    kept.add(_report("a", exit_code=7), now=1000.0)
    (entry,) = kept.current(now=1000.0)
    assert set(entry) == set(FIELDS)
    assert entry["exit_code"] == 7 and "token" not in entry and "node" not in entry


def test_exits_are_forgotten_after_the_retention() -> None:
    kept = RecentExits()
    kept.add(_report("old"), now=1000.0)
    kept.add(_report("new"), now=1000.0 + RETENTION_S / 2)
    assert [e["job_id"] for e in kept.current(now=1000.0 + RETENTION_S)] == ["old", "new"]
    assert [e["job_id"] for e in kept.current(now=1000.0 + RETENTION_S + 1)] == ["new"]


def test_only_the_newest_exits_are_kept_and_long_messages_are_cut() -> None:
    kept = RecentExits()
    for i in range(MAX_KEPT + 5):
        kept.add(_report(f"j{i}", message="x" * (recent_exits.MAX_MESSAGE_CHARS + 50)), now=1000.0 + i)
    entries = kept.current(now=1000.0 + MAX_KEPT)
    assert len(entries) == MAX_KEPT
    assert entries[0]["job_id"] == "j5" and entries[-1]["job_id"] == f"j{MAX_KEPT + 4}"
    assert {len(e["message"]) for e in entries} == {recent_exits.MAX_MESSAGE_CHARS}


def test_the_state_round_trip_keeps_the_exits_and_their_times() -> None:
    kept = RecentExits()
    kept.add(_report("a"), now=1000.0)
    again = RecentExits(kept.to_state())
    assert again.current(now=1000.0) == kept.current(now=1000.0)
    assert again.current(now=1000.0 + RETENTION_S + 1) == []


def test_malformed_state_entries_are_left_out() -> None:
    again = RecentExits([["soon", {"job_id": "a"}], [1.0], "junk", None, [5.0, {"job_id": "ok"}]])
    assert [e["job_id"] for e in again.current(now=5.0)] == ["ok"]
    assert RecentExits(None).current(now=0.0) == []
