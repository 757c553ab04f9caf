"""scheduler.accounting: the work an attempt did, what it kept and what the ledger counts as lost."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from scheduler.accounting import attempt_work_seconds, lost_gpu_seconds

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def test_a_first_attempt_works_from_start_to_notice() -> None:
    assert attempt_work_seconds(T0, T0 + timedelta(seconds=90), 1, resume_overhead=30.0) == 90.0


def test_a_resumed_attempt_spends_the_overhead_restoring_and_never_works_negative_time() -> None:
    assert attempt_work_seconds(T0, T0 + timedelta(seconds=90), 2, resume_overhead=30.0) == 60.0
    assert attempt_work_seconds(T0, T0 + timedelta(seconds=10), 3, resume_overhead=30.0) == 0.0
    assert attempt_work_seconds(T0, T0 - timedelta(seconds=5), 1, resume_overhead=0.0) == 0.0


def test_lost_work_is_gpu_seconds_unless_a_checkpoint_kept_it() -> None:
    assert lost_gpu_seconds(60.0, 4, checkpointed=False) == 240.0
    assert lost_gpu_seconds(60.0, 4, checkpointed=True) == 0.0
