"""The exit-status and ``checkpointed`` rules of an ended attempt (docs/agent.md), without processes."""

from __future__ import annotations

import signal

from cluster import protocol
from cluster.agent.attempt import TrackedAttempt
from cluster.agent.outcome import checkpointed, ended_at, outcome, wrote_marker


def _att(**changes) -> TrackedAttempt:
    base = dict(job_id=1, attempt=0, pgid=10, start_ticks=1, started_at=100.0, grace_period=5.0, time_limit=None,
                job_dir="/j", checkpoint_dir="/c")
    return TrackedAttempt(**{**base, **changes})


def _rec(main, last=None, done=True, **extra):
    return {"main": main, "last": last or main, "done": done, "ended_at": 120.0, **extra}


def test_a_command_that_exits_by_itself_reports_its_code_and_no_reason():
    assert outcome(_att(), _rec({"exit_code": 3, "signal": None})) == (3, None, None)


def test_after_a_notice_the_last_process_exit_code_is_the_jobs_when_the_shell_died_of_the_signal():
    att = _att(notice_at=110.0, reason=protocol.EXIT_PREEMPT)
    record = _rec({"exit_code": None, "signal": 15}, last={"exit_code": 143, "signal": None})
    assert outcome(att, record) == (143, None, protocol.EXIT_PREEMPT)


def test_a_sigkilled_attempt_reports_signal_9():
    att = _att(notice_at=110.0, killed_at=115.0, reason=protocol.EXIT_CANCEL)
    record = _rec({"exit_code": None, "signal": 15}, last={"exit_code": None, "signal": 9}, done=False)
    assert outcome(att, record) == (None, signal.SIGKILL, protocol.EXIT_CANCEL)


def test_a_fenced_attempt_is_lost_whatever_its_status():
    assert outcome(_att(reason=None), _rec({"exit_code": 0, "signal": None}, fenced=True))[2] == protocol.EXIT_LOST


def test_without_an_exit_file_or_a_status_the_attempt_is_lost():
    assert outcome(_att(), None) == (None, None, protocol.EXIT_LOST)


def test_checkpointed_by_a_new_marker_or_a_clean_exit_after_a_notice():
    assert checkpointed(_att(marker_before=[1, 2]), 0, [1, 3])
    assert not checkpointed(_att(marker_before=[1, 2]), 0, [1, 2])
    assert checkpointed(_att(notice_at=1.0), 143, None)
    assert not checkpointed(_att(notice_at=1.0, killed_at=2.0), None, None)
    assert not checkpointed(_att(), 0, None)


def test_only_a_new_marker_counts_as_writing_it():
    assert wrote_marker(_att(marker_before=None), [1, 3]) and wrote_marker(_att(marker_before=[1, 2]), [1, 3])
    assert not wrote_marker(_att(marker_before=[1, 2]), [1, 2])
    assert not wrote_marker(_att(notice_at=1.0), None)  # exited within its grace: checkpointed, no marker


def test_ended_at_prefers_the_last_process_then_the_command_then_now():
    assert ended_at({"ended_at": 5.0, "main": {"at": 4.0}}, 9.0) == 5.0
    assert ended_at({"ended_at": None, "main": {"at": 4.0}}, 9.0) == 4.0
    assert ended_at(None, 9.0) == 9.0
