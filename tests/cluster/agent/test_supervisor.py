"""The process supervisor on its own: real job processes, no broker.

The supervisor is driven by calling tick()/stream_logs() in a loop, as the
agent does; its reports are collected from the emit callback.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest
from tests.cluster.agent.agent_testlib import group_alive, kill_group, step_numbers, train_command

from cluster import protocol


def test_exit_code_and_output_of_a_plain_command(h):
    assert h.launch("a", 1, "echo out; echo err >&2; exit 3") == "started"
    ex = h.exited("a")
    assert (ex["exit_code"], ex["signal"], ex["reason"], ex["checkpointed"]) == (3, None, None, False)
    assert sorted(h.lines("a")) == ["err", "out"]
    assert h.sup.attempts == {}


def test_a_job_killed_by_a_signal_reports_the_signal(h):
    h.launch("s", 1, "kill -SEGV $$")
    ex = h.exited("s")
    assert (ex["exit_code"], ex["signal"]) == (None, signal.SIGSEGV)


def test_the_shell_dying_of_the_notice_reports_the_jobs_own_exit(h):
    # dash does not exec the command: the shell dies of SIGTERM at once while
    # the job (its child) checkpoints and exits 143; that status is reported.
    h.launch("t", 1, train_command(TRAIN_STEPS=100000, TRAIN_SLEEP=0.01), grace_period=30)
    h.wait_line("t", lambda l: l.startswith("step 3/"))
    assert h.sup.preempt({"job_id": "t", "attempt": 1, "grace_period": 30})
    ex = h.exited("t")
    assert (ex["exit_code"], ex["signal"], ex["checkpointed"], ex["reason"]) == (143, None, True, protocol.EXIT_PREEMPT)
    saved = json.loads(Path(h.sup.workdir / "jobs" / "t" / "attempt-1.exit").read_text())
    assert saved["main"]["signal"] == signal.SIGTERM and saved["last"]["exit_code"] == 143


def test_a_job_dying_of_sigterm_without_checkpoint_is_not_checkpointed(h):
    h.launch("d", 1, "echo up; sleep 60", grace_period=30)
    h.wait_line("d", lambda l: l == "up")
    h.sup.preempt({"job_id": "d", "attempt": 1, "grace_period": 30})
    ex = h.exited("d")
    assert (ex["signal"], ex["checkpointed"]) == (signal.SIGTERM, False)


def test_processes_left_behind_by_a_finished_command_are_stopped(h):
    h.launch("bg", 1, "sleep 60 & echo main-done", grace_period=0.2)
    pgid = h.of(protocol.REPORT_STARTED, job_id="bg")[0]["pid"]
    ex = h.exited("bg")
    assert (ex["exit_code"], ex["reason"]) == (0, None)
    assert h.lines("bg") == ["main-done"]
    assert not group_alive(pgid)


def test_the_attempt_lasts_while_an_orphaned_descendant_checkpoints(h):
    # The shell exits at once on SIGTERM; the orphaned grandchild takes a while
    # to "checkpoint" and the attempt is only over when it is done.
    script = (
        "(trap 'sleep 0.5; echo saved > $CHECKPOINT_DIR/state; touch $CHECKPOINT_DIR/.checkpoint-complete; exit 0' TERM; "
        "echo up; while :; do sleep 0.05; done) & wait"
    )
    h.launch("o", 1, script, grace_period=30)
    h.wait_line("o", lambda l: l == "up")
    h.sup.preempt({"job_id": "o", "attempt": 1, "grace_period": 30})
    ex = h.exited("o")
    assert ex["checkpointed"] is True
    assert (h.sup.checkpoint_root / "o" / "state").read_text() == "saved\n"


def test_marker_from_an_earlier_attempt_does_not_count(h):
    ckpt = h.sup.checkpoint_root / "m"
    ckpt.mkdir(parents=True)
    (ckpt / protocol.CHECKPOINT_MARKER).write_text("old")
    h.launch("m", 2, "sleep 60", grace_period=0.2, resume=True)
    h.sup.preempt({"job_id": "m", "attempt": 2, "grace_period": 0.2})
    assert h.exited("m", 2)["checkpointed"] is False


def test_marker_written_during_the_attempt_counts_even_when_killed(h):
    h.launch("mk", 1, "touch $CHECKPOINT_DIR/.checkpoint-complete; trap '' TERM; echo up; sleep 60", grace_period=0.2)
    h.wait_line("mk", lambda l: l == "up")
    h.sup.preempt({"job_id": "mk", "attempt": 1, "grace_period": 0.2})
    ex = h.exited("mk")
    assert (ex["signal"], ex["checkpointed"]) == (signal.SIGKILL, True)


def test_idempotency_rules(h):
    assert h.launch("i", 2, "sleep 60") == "started"
    (first,) = h.of(protocol.REPORT_STARTED)
    assert h.launch("i", 2, "sleep 60") == "duplicate"
    assert h.of(protocol.REPORT_STARTED)[1] == first
    assert h.launch("i", 1, "sleep 60") == "refused"
    assert h.sup.preempt({"job_id": "i", "attempt": 1, "grace_period": 0}) is False
    assert h.sup.kill({"job_id": "other", "attempt": 1}) is False
    assert h.launch("i", 3, "sleep 60") == "started"
    third = h.of(protocol.REPORT_STARTED)[-1]
    assert h.exited("i", 2)["reason"] == protocol.EXIT_STALE
    assert h.sup.running() == [["i", 3]]
    h.sup.kill({"job_id": "i", "attempt": 3, "grace_period": 0})
    h.exited("i", 3)
    assert h.launch("i", 3, "sleep 60") == "refused"
    # Attempt 2's duplicate launch repeated its start (the server asks again when it missed it).
    assert [(r["attempt"], r["pid"]) for r in h.of(protocol.REPORT_STARTED)] == [
        (2, first["pid"]), (2, first["pid"]), (3, third["pid"])]


def test_reconcile_stops_only_attempts_not_kept(h):
    h.launch("keep", 1, "sleep 60")
    h.launch(17, 2, "sleep 60")
    h.launch("drop", 1, "sleep 60")
    stopped = h.sup.reconcile({"keep": [["keep", 1], [17, 2]]})
    assert stopped == [("drop", 1)]
    assert h.exited("drop")["reason"] == protocol.EXIT_STALE
    assert sorted(map(str, h.sup.running())) == sorted(map(str, [["keep", 1], [17, 2]]))


def test_a_reconcile_signed_before_a_launch_does_not_stop_it_and_one_signed_after_does(h, tmp_path):
    """A reconcile's keep list says nothing of later launches: one replayed from the broker by anyone
    who read it there, or delivered late, must not stop them (the agent has checked both signatures)."""
    from cluster import message_signing

    def signed(task, kwargs, at):
        return message_signing.signed("secret", task, kwargs, at)

    cmd = lambda job: protocol.LaunchCommand(job_id=job, attempt=1, command="sleep 60").to_kwargs()  # noqa: E731
    h.sup.launch(signed(protocol.AGENT_LAUNCH, cmd("old"), 100.0))
    h.sup.launch(signed(protocol.AGENT_LAUNCH, cmd("new"), 300.0))
    h.sup.launch(cmd("unsigned"))
    assert h.sup.reconcile(signed(protocol.AGENT_RECONCILE, {"keep": []}, 200.0)) == [("old", 1), ("unsigned", 1)]
    assert h.sup.reconcile(signed(protocol.AGENT_RECONCILE, {"keep": []}, 250.0)) == [("old", 1), ("unsigned", 1)]
    assert ("new", 1) in h.sup.attempts
    state = h.sup.to_state()  # a restarted agent still knows when the launch was signed
    assert {a["job_id"]: a["ordered_at"] for a in state["attempts"]}["new"] == 300.0
    assert ("new", 1) in h.sup.reconcile(signed(protocol.AGENT_RECONCILE, {"keep": []}, 301.0))
    assert h.exited("new")["reason"] == protocol.EXIT_STALE


def test_a_launch_of_a_forgotten_job_replayed_is_refused_and_nothing_starts(h):
    from cluster import message_signing

    h.sup.launches.limit = 1
    cmd = lambda job: protocol.LaunchCommand(job_id=job, attempt=1, command="true").to_kwargs()  # noqa: E731
    first = message_signing.signed("secret", protocol.AGENT_LAUNCH, cmd("a"), 100.0)
    assert h.sup.launch(first) == "started"
    h.exited("a")
    assert h.sup.launch(message_signing.signed("secret", protocol.AGENT_LAUNCH, cmd("b"), 200.0)) == "started"
    assert "a" not in h.sup.launches.newest  # forgotten
    assert h.sup.launch(first) == "refused"  # the same message again
    assert len(h.of(protocol.REPORT_STARTED, job_id="a")) == 1


@pytest.mark.parametrize(
    ("method", "kwargs", "field"),
    [
        ("launch", {"job_id": "a", "attempt": 1}, "command"),
        ("launch", {"job_id": "a b", "attempt": 1, "command": "x"}, "job_id"),
        ("launch", {"job_id": "a", "attempt": 1, "command": "x", "gpu_indices": [0, 0]}, "gpu_indices"),
        ("launch", {"job_id": "a", "attempt": 1, "command": "x", "time_limit": 0}, "time_limit"),
        ("preempt", {"job_id": "a"}, "attempt"),
        ("preempt", {"job_id": "a", "attempt": 1, "grace_period": -1}, "grace_period"),
        ("kill", {"job_id": "a", "attempt": 1, "reason": "Drop Tables"}, "reason"),
        ("reconcile", {}, "keep"),
        ("reconcile", {"keep": [["a"]]}, "keep[0]"),
    ],
)
def test_malformed_commands_raise_naming_the_field_and_change_nothing(h, method, kwargs, field):
    with pytest.raises(protocol.ProtocolError) as err:
        getattr(h.sup, method)(kwargs)
    assert err.value.field == field
    assert h.reports == [] and h.sup.attempts == {} and not (h.sup.workdir / "jobs").exists()


def test_a_new_supervisor_readopts_from_saved_state(h):
    h.launch("r", 1, train_command(TRAIN_STEPS=100000, TRAIN_SLEEP=0.01), grace_period=30)
    h.launch("q", 1, "while [ ! -e go ]; do sleep 0.05; done; exit 5")
    h.wait_line("r", lambda l: l.startswith("step 3/"))
    state = json.loads(json.dumps(h.sup.to_state()))
    old_reports = len(h.reports)

    h.sup = h.make()
    assert sorted(h.sup.restore(state)) == [("q", 1), ("r", 1)]
    (h.sup.workdir / "jobs" / "q" / "work" / "go").touch()
    assert h.exited("q")["exit_code"] == 5
    h.sup.preempt({"job_id": "r", "attempt": 1, "grace_period": 30})
    ex = h.exited("r")
    assert (ex["exit_code"], ex["checkpointed"]) == (143, True)
    # Log streaming continued from the saved offset: no line twice, none lost.
    assert step_numbers(h.lines("r")) == list(range(1, step_numbers(h.lines("r"))[-1] + 1))
    assert len(h.of(protocol.REPORT_STARTED)) == 2 and old_reports <= len(h.reports)


def test_a_recycled_pid_is_not_mistaken_for_the_job(h):
    h.launch("p", 1, "true")
    state = h.sup.to_state()
    h.exited("p")
    # As if the pid now belonged to another live process (started later).
    other = subprocess.Popen(["sleep", "60"])
    try:
        state["attempts"][0]["pgid"] = other.pid
        h.sup = h.make()
        h.sup.restore(state)
        h.sup.tick()
        assert h.sup.attempts == {}
        assert other.poll() is None
    finally:
        other.kill()
        other.wait()


def test_an_attempt_whose_end_cannot_be_known_is_reported_lost(h):
    h.launch("l", 1, "sleep 60")
    state = h.sup.to_state()
    pgid = state["attempts"][0]["pgid"]
    kill_group(pgid)  # the shim dies without writing its exit file
    os.waitpid(pgid, 0)  # reap it here, as init would after an agent crash
    h.reports.clear()
    h.sup = h.make()
    h.sup.restore(state)
    h.sup.tick()
    (ex,) = h.of(protocol.REPORT_EXITED)
    assert (ex["exit_code"], ex["signal"], ex["reason"]) == (None, None, protocol.EXIT_LOST)


def test_a_declined_launch_is_reported_ended_and_never_starts_later(h):
    kwargs = protocol.LaunchCommand(job_id="d", attempt=2, command="sleep 60").to_kwargs()
    assert h.sup.decline(kwargs, protocol.EXIT_AGENT_STOP, "the agent is stopping") == "declined"
    assert h.sup.attempts == {}
    assert h.lines("d", 2) == ["[agent] the agent is stopping"]
    (ex,) = h.of(protocol.REPORT_EXITED, job_id="d")
    assert (ex["attempt"], ex["exit_code"], ex["signal"], ex["reason"]) == (2, None, None, protocol.EXIT_AGENT_STOP)
    # Declining again, or launching the same attempt (a redelivery), starts nothing and reports nothing new.
    assert h.sup.decline(kwargs, protocol.EXIT_AGENT_STOP, "again") == "refused"
    assert h.sup.launch(kwargs) == "refused"
    assert len(h.of(protocol.REPORT_EXITED)) == 1 and h.of(protocol.REPORT_STARTED) == []
    # An attempt that runs here is left to its own stop, not reported twice.
    assert h.launch("r", 1, "sleep 60") == "started"
    running = protocol.LaunchCommand(job_id="r", attempt=1, command="sleep 60").to_kwargs()
    assert h.sup.decline(running, protocol.EXIT_AGENT_STOP, "stopping") == "duplicate"
    assert h.of(protocol.REPORT_EXITED, job_id="r") == []
    with pytest.raises(protocol.ProtocolError) as bad:
        h.sup.decline({**kwargs, "attempt": 3, "gpu_indices": [-1]}, protocol.EXIT_AGENT_STOP, "stopping")
    assert bad.value.field.startswith("gpu_indices")


