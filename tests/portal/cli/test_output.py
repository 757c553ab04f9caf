"""Rendering: tables, timestamps, the job view and the quota view."""

from __future__ import annotations

import re
from datetime import datetime, timezone

import pytest

from portal.cli.commands import format_job
from portal.cli.output import format_quota, job_reason
from portal.cli.output import cell, key_values, local_time, render_table, truncate


def test_table_aligns_columns_and_right_aligns_numbers() -> None:
    rows = [{"id": 7, "name": "a"}, {"id": 1234, "name": "longer-name"}]
    table = render_table([("ID", lambda r: r["id"]), ("NAME", lambda r: r["name"])], rows)
    assert table.splitlines() == [
        "  ID  NAME",
        "   7  a",
        "1234  longer-name",
    ]


def test_empty_table_is_just_the_header() -> None:
    assert render_table([("ID", lambda r: r["id"]), ("STATE", lambda r: r["s"])], []) == "ID  STATE"


@pytest.mark.parametrize(
    ("value", "text"),
    [(None, "-"), ("", "-"), (True, "yes"), (False, "no"), (2.50, "2.5"), ([0, 1], "0,1"),
     ([], "-"), ({"n1": [0, 1]}, "n1:0,1"), ("x", "x")],
)
def test_cell_text(value: object, text: str) -> None:
    assert cell(value) == text


def test_truncate_long_names() -> None:
    assert truncate("a" * 40, 10) == "aaaaaaa..."
    assert truncate("short", 10) == "short"
    assert truncate(None) is None


def test_local_time_converts_utc_to_the_local_zone() -> None:
    stamp = "2025-01-02T03:04:05.678Z"
    expected = datetime(2025, 1, 2, 3, 4, 5, tzinfo=timezone.utc).astimezone()
    assert local_time(stamp) == expected.strftime("%Y-%m-%d %H:%M:%S")
    assert local_time("not a time") == "not a time"
    assert local_time(None) is None


def test_key_values_align() -> None:
    assert key_values([("Job", 1), ("Exit code", None)]) == "Job:       1\nExit code: -"


def job(**overrides: object) -> dict[str, object]:
    base = {
        "id": 42, "name": "train", "owner": "alice", "command": "python train.py", "job_class": "TE",
        "num_gpus": 2, "num_cpus": 4.0, "mem_gb": 16.0, "grace_period": 30, "time_limit": 3600,
        "priority": 0, "state": "PENDING", "pending_reason": "QuotaExceeded",
        "pending_message": "TE GPUs 4 of 4 in use", "submitted_at": None, "started_at": None,
        "ended_at": None, "exit_code": None, "attempt_count": 1,
        "attempts": [{"number": 1, "node_names": ["n1"], "gpu_indices": {"n1": [0, 1]},
                      "started_at": None, "ended_at": None, "exit_code": None, "signal": 15,
                      "outcome": "PREEMPTED", "notice_at": None, "vacated_at": None,
                      "checkpointed": True, "lost_gpu_seconds": 0.0}],
        "events": [{"at": None, "state": "PENDING", "reason": "Submitted", "message": "by alice"}],
    }
    base.update(overrides)
    return base


def header_fields(text: str) -> dict[str, str]:
    """The ``Key: value`` block at the top of ``format_job``'s output."""
    block = text.split("\n\n")[0]
    return dict((k, v.strip()) for k, v in (line.split(":", 1) for line in block.splitlines()))


def test_format_job_shows_reason_attempts_and_events() -> None:
    text = format_job(job())
    fields = header_fields(text)
    assert fields["Reason"] == "QuotaExceeded: TE GPUs 4 of 4 in use"
    assert (fields["Time limit"], fields["Grace period"]) == ("1:00:00", "0:00:30")
    assert (fields["Job"], fields["GPUs"], fields["Memory (GB)"], fields["Started"]) == ("42", "2", "16", "-")
    assert fields["Queue order"] == "-"  # no factors given: a job not pending
    factors = {"class": "BE", "class_first": False, "fair_share": 0.4414, "priority": 5,
               "waiting_since": "2026-12-07T07:46:46Z"}
    ordered = header_fields(format_job({**job(), "priority_factors": factors}))["Queue order"]
    assert re.fullmatch(r"class BE; fair share 0\.441; priority 5; waiting since 2026-12-0[67] \d\d:46:46", ordered)
    te = header_fields(format_job({**job(), "priority_factors": {**factors, "class": "TE", "class_first": True,
                                                                  "fair_share": None}}))["Queue order"]
    assert te.startswith("class TE (considered before BE); fair share off; priority 5;")
    unlimited = header_fields(format_job({**job(), "num_cpus": 0.0, "mem_gb": 0.0}))
    assert (unlimited["CPUs"], unlimited["Memory (GB)"]) == ("not limited", "not limited")
    value_columns = {len(line) - len(line.split(":", 1)[1].lstrip())
                     for line in text.split("\n\n")[0].splitlines()}
    assert len(value_columns) == 1  # every value starts in the same column
    attempts = text.split("Attempts:\n")[1].split("\n\n")[0].splitlines()
    assert attempts[0].split() == ["#", "NODES", "GPUS", "STARTED", "ENDED", "OUTCOME", "EXIT",
                                   "SIGNAL", "CHECKPOINTED", "LOST_GPU_S", "PEAK_MEM", "CPU_S"]
    assert attempts[1].split() == ["1", "n1", "n1:0,1", "-", "-", "PREEMPTED", "-", "15", "yes", "0", "-", "-"]
    assert text.split("Events:\n")[1].splitlines()[1].split() == [
        "-", "PENDING", "Submitted", "by", "alice"]


def test_an_attempt_that_only_exited_within_its_grace_is_not_shown_as_a_written_checkpoint() -> None:
    def checkpointed_cell(**attempt: object) -> str:
        (row,) = job(attempts=[{**job()["attempts"][0], **attempt}])["attempts"]
        text = format_job(job(attempts=[row]))
        return text.split("Attempts:\n")[1].splitlines()[1].split()[8]

    assert checkpointed_cell(checkpoint_marker=False) == "in-grace"
    assert checkpointed_cell(checkpoint_marker=True) == checkpointed_cell(checkpoint_marker=None) == "yes"
    assert checkpointed_cell(checkpointed=False, checkpoint_marker=False) == "no"


def test_format_job_without_attempts_has_no_attempt_table() -> None:
    text = format_job(job(attempts=[], events=[], pending_message=""))
    assert "Attempts:\n" not in text and "Events:" not in text
    assert header_fields(text)["Reason"] == "QuotaExceeded"
    assert header_fields(text)["Hold"] == "-"
    assert header_fields(format_job(job(hold="admin")))["Hold"] == "admin"


def test_format_quota_pairs_limits_with_usage() -> None:
    body = {"limits": {"max_gpus": 8, "max_te_gpus": None}, "usage": {"max_gpus": 3, "gpu_hours": 1.5}}
    assert format_quota(body).splitlines() == [
        "LIMIT        VALUE      USAGE",
        "max_gpus     8              3",
        "max_te_gpus  unlimited      -",
        "gpu_hours    unlimited    1.5",
    ]


def test_format_quota_names_the_scopes_that_bind() -> None:
    body = {"limits": {"max_gpus": 4}, "usage": {"max_gpus": 1},
            "scopes": [{"scope": "user", "name": "alice"}, {"scope": "group", "name": "vision"}]}
    assert format_quota(body).splitlines()[-1] == "(the tightest of: user alice, group vision)"


def test_an_array_task_is_addressed_as_array_and_index() -> None:
    from portal.cli.output import job_ref

    assert job_ref({"id": 14, "array_id": 12, "array_index": 2}) == "12_2"
    assert job_ref({"id": 12, "array_id": 12, "array_index": 0}) == "12_0"
    assert job_ref({"id": 7, "array_id": None}) == 7
    assert job_ref({"id": 7}) == 7


def test_an_ended_job_says_why_it_ended_with_the_message_of_the_event_that_first_gave_the_reason() -> None:
    cancelled = job(state="CANCELLED", pending_reason="", pending_message="", ended_at="2026-12-07T10:18:17Z",
                    events=[{"at": None, "state": "PENDING", "reason": "Submitted", "message": ""},
                            {"at": None, "state": "CANCELLING", "reason": "Cancelled", "message": "cancelled by demo"},
                            {"at": None, "state": "CANCELLED", "reason": "Cancelled",
                             "message": "attempt 2 on local-1 ended by signal 15"}])
    assert header_fields(format_job(cancelled))["Reason"] == "Cancelled: cancelled by demo"
    never = job(state="CANCELLED", pending_reason="", pending_message="", ended_at="2026-12-07T10:18:04Z",
                events=[{"at": None, "state": "PENDING", "reason": "Submitted", "message": ""},
                        {"at": None, "state": "CANCELLED", "reason": "DependencyNeverSatisfied",
                         "message": "afterok:8 can no longer be satisfied"}])
    assert header_fields(format_job(never))["Reason"] == (
        "DependencyNeverSatisfied: afterok:8 can no longer be satisfied")
    assert job_reason(never, with_message=False) == "DependencyNeverSatisfied"
    running = job(state="RUNNING", pending_reason="", pending_message="")  # neither waiting nor ended
    assert job_reason(running) is None and header_fields(format_job(running))["Reason"] == "-"
    assert job_reason(job()) == "QuotaExceeded: TE GPUs 4 of 4 in use"  # waiting: its pending reason


def test_lost_gpu_and_cpu_seconds_are_shown_to_a_tenth() -> None:
    (row,) = job()["attempts"]
    text = format_job(job(attempts=[{**row, "lost_gpu_seconds": 62.528118, "cpu_seconds": 4.25}]))
    cells = text.split("Attempts:\n")[1].splitlines()[1].split()
    assert (cells[9], cells[11]) == ("62.5", "4.3")  # halves up, as the job page rounds
