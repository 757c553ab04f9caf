"""The agent as a process: commands in through node.<name>, reports out on the default queue.

Commands are sent exactly as the server sends them (Celery send_task to the
node's queue); reports are read back from the default queue. Jobs are real
processes: the example training job and small shell commands.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess

import pytest
from tests.cluster.agent.agent_testlib import PY, SHELL_EXAMPLE, TRAIN, group_alive, step_numbers, train_command, wait_until

from cluster import protocol
from cluster.agent import __version__, recent_exits
from cluster.agent.config import default_advertise_address

pytestmark = pytest.mark.redis


def test_register_and_heartbeats_carry_node_capacity_running_attempts_and_the_nodes_signature(node):
    reg = node.reports.wait(protocol.REPORT_REGISTER)
    assert reg["gpus"] == 2
    assert reg["gpu_models"] == ["virtual", "virtual"]
    assert reg["cpus"] > 0 and reg["mem_gb"] > 0
    assert reg["signed"] and "token" not in reg  # signed with the token, which never travels
    assert reg["agent_version"] == __version__
    assert reg["address"] == default_advertise_address(node.name)  # no --advertise-address

    node.launch("hb-job", 1, "sleep 30", gpu_indices=[0])
    node.reports.wait(protocol.REPORT_STARTED, job_id="hb-job")
    hb = node.reports.wait_heartbeat(lambda hb: hb["running"] == [["hb-job", 1]], "hb-job running")
    assert hb["signed"] and "token" not in hb
    assert isinstance(hb["sent_at"], float)


def test_heartbeats_repeat_recent_exits_also_after_an_agent_restart(make_node):
    """The exit report is sent once; heartbeats repeat its fields, so a server that lost the report
    still learns how the attempt ended (cluster/agent/recent_exits.py), and a restarted agent goes on."""
    n = make_node()
    n.start()
    n.launch("quick", 1, "exit 3")
    report = n.reports.wait(protocol.REPORT_EXITED, job_id="quick")

    def repeated(hb):
        return next((e for e in hb.get("exited", []) if (e["job_id"], e["attempt"]) == ("quick", 1)), None)

    hb = n.reports.wait_heartbeat(repeated, "quick's exit repeated")
    assert repeated(hb) == {k: report[k] for k in recent_exits.FIELDS}
    assert repeated(hb)["exit_code"] == 3

    n.stop_agent(signal.SIGKILL)
    n.start()
    n.reports.wait(protocol.REPORT_REGISTER)
    hb = n.reports.wait_heartbeat(repeated, "quick's exit repeated by the restarted agent")
    assert repeated(hb)["exit_code"] == 3
    assert len(n.reports.all(protocol.REPORT_EXITED, job_id="quick")) == 1  # the report itself is not sent again


def test_asked_to_register_again_the_agent_sends_its_register_again(node):
    first = node.reports.wait(protocol.REPORT_REGISTER)
    node.send(protocol.AGENT_REGISTER_AGAIN)
    wait_until(lambda: len(node.reports.all(protocol.REPORT_REGISTER)) == 2, what="a second register")
    assert node.reports.all(protocol.REPORT_REGISTER)[1] == first


def test_register_carries_the_advertised_address(make_node):
    n = make_node("--advertise-address", "gpu-node-7.example.org")
    n.start()
    assert n.reports.wait(protocol.REPORT_REGISTER)["address"] == "gpu-node-7.example.org"


def test_training_job_runs_to_completion_and_streams_its_log(node):
    node.launch("train-1", 1, train_command(TRAIN_STEPS=25, TRAIN_SLEEP=0, TRAIN_EVAL_EVERY=0), gpu_indices=[1], grace_period=5)

    started = node.reports.wait(protocol.REPORT_STARTED, job_id="train-1", attempt=1)
    assert started["pid"] > 0 and started["signed"]
    exited = node.reports.wait(protocol.REPORT_EXITED, job_id="train-1", attempt=1)
    assert (exited["exit_code"], exited["signal"], exited["reason"], exited["notice_at"]) == (0, None, None, None)
    assert exited["ended_at"] >= started["started_at"]

    lines = node.reports.log_lines("train-1", 1)
    assert step_numbers(lines) == list(range(1, 26))
    assert lines[-1].startswith("done step=25")
    log_file = node.job_dir("train-1") / "attempt-1.log"
    assert log_file.read_text().splitlines() == lines
    # LOG reports of an attempt all precede its EXITED report.
    order = [t for t, kw in node.reports.reports if kw.get("job_id") == "train-1"]
    assert order.index(protocol.REPORT_EXITED) > max(i for i, t in enumerate(order) if t == protocol.REPORT_LOG)


def test_job_environment_follows_the_contract_and_hides_the_node_token(node):
    printenv = (
        'echo "cvd=$CUDA_VISIBLE_DEVICES job=$GPUSCHED_JOB_ID attempt=$GPUSCHED_ATTEMPT resume=$RESUME '
        'grace=$GRACE_PERIOD ckpt=$CHECKPOINT_DIR extra=$EXTRA token=${GPUSCHED_AGENT_TOKEN:-unset} pwd=$(pwd)"'
    )
    node.launch("env-job", 3, printenv, gpu_indices=[1, 0], grace_period=2.5, resume=True, env={"EXTRA": "x y"})
    node.reports.wait(protocol.REPORT_EXITED, job_id="env-job", attempt=3)
    (line,) = node.reports.log_lines("env-job", 3)
    fields = dict(part.split("=", 1) for part in line.split(" ") if "=" in part)
    assert fields["cvd"] == "1,0"
    assert (fields["job"], fields["attempt"], fields["resume"], fields["grace"]) == ("env-job", "3", "1", "2.5")
    assert fields["ckpt"] == str(node.checkpoint_dir("env-job"))
    assert node.checkpoint_dir("env-job").is_dir()
    assert fields["token"] == "unset"
    assert fields["pwd"] == str(node.job_dir("env-job") / "work")
    assert "extra=x y" in line


def test_preempted_training_job_checkpoints_and_resumes_without_repeating_work(node, tmp_path):
    settings = {"TRAIN_STEPS": 150, "TRAIN_SLEEP": 0.02, "TRAIN_EVAL_EVERY": 0, "TRAIN_SEED": 7}
    node.launch("be-1", 1, train_command(**settings), gpu_indices=[0], grace_period=30)
    node.reports.wait_log("be-1", 1, lambda l: l.startswith("step 20/"), "step 20")

    node.send(protocol.AGENT_PREEMPT, job_id="be-1", attempt=1, grace_period=30)
    first = node.reports.wait(protocol.REPORT_EXITED, job_id="be-1", attempt=1)
    assert first["reason"] == protocol.EXIT_PREEMPT
    assert first["checkpointed"] is True and first["checkpoint_marker"] is True
    assert first["exit_code"] == 143 and first["signal"] is None
    assert first["notice_at"] is not None and first["ended_at"] >= first["notice_at"]
    lines1 = node.reports.log_lines("be-1", 1)
    saved_at = int(lines1[-1].split("checkpoint saved at step ")[1].split()[0])
    assert step_numbers(lines1) == list(range(1, saved_at + 1))

    node.launch("be-1", 2, train_command(**settings), gpu_indices=[1], grace_period=30, resume=True)
    second = node.reports.wait(protocol.REPORT_EXITED, job_id="be-1", attempt=2)
    assert second["exit_code"] == 0
    lines2 = node.reports.log_lines("be-1", 2)
    assert lines2[0] == f"resumed from checkpoint at step {saved_at} in {node.checkpoint_dir('be-1')}"
    assert step_numbers(lines2) == list(range(saved_at + 1, 151))
    # The attempt-1 log survives the requeue.
    assert (node.job_dir("be-1") / "attempt-1.log").read_text().splitlines() == lines1

    # Same weights as a run that was never interrupted, in the environment a job gets (built from
    # scratch: host variables that tune the BLAS, such as OPENBLAS_CORETYPE, change the digits).
    reference = subprocess.run(
        [PY, str(TRAIN)], env={"PATH": os.environ["PATH"], **{k: str(v) for k, v in settings.items()},
                               "TRAIN_SLEEP": "0", "CHECKPOINT_DIR": str(tmp_path / "reference")},
        capture_output=True, text=True, check=True,
    )
    assert lines2[-1] == reference.stdout.splitlines()[-1]


def test_shell_example_checkpoints_on_preemption_and_resumes(node):
    cmd = f"STEPS=400 SLEEP_PER_STEP=0.05 sh {SHELL_EXAMPLE}"
    node.launch("sh-1", 1, cmd, grace_period=10)
    node.reports.wait_log("sh-1", 1, lambda l: l == "step 3/400", "step 3")
    node.send(protocol.AGENT_PREEMPT, job_id="sh-1", attempt=1, grace_period=10)
    first = node.reports.wait(protocol.REPORT_EXITED, job_id="sh-1", attempt=1)
    assert (first["exit_code"], first["checkpointed"]) == (143, True)
    saved = int((node.checkpoint_dir("sh-1") / "step").read_text())

    node.launch("sh-1", 2, f"STEPS={saved + 3} SLEEP_PER_STEP=0.01 sh {SHELL_EXAMPLE}", resume=True)
    node.reports.wait(protocol.REPORT_EXITED, job_id="sh-1", attempt=2, exit_code=0)
    lines = node.reports.log_lines("sh-1", 2)
    assert lines[0] == f"resumed from checkpoint at step {saved}"
    assert lines[1:4] == [f"step {saved + i}/{saved + 3}" for i in (1, 2, 3)]


def test_a_job_that_only_exits_on_the_notice_counts_as_checkpointed_without_a_marker(node):
    node.launch("quitter", 1, "trap 'echo bye; exit 0' TERM; echo ready; while :; do sleep 0.1; done", grace_period=10)
    node.reports.wait_log("quitter", 1, lambda l: l == "ready", "ready")
    node.send(protocol.AGENT_PREEMPT, job_id="quitter", attempt=1, grace_period=10)
    exited = node.reports.wait(protocol.REPORT_EXITED, job_id="quitter")
    assert (exited["exit_code"], exited["signal"], exited["reason"]) == (0, None, protocol.EXIT_PREEMPT)
    assert (exited["checkpointed"], exited["checkpoint_marker"]) == (True, False)


def test_job_ignoring_sigterm_is_sigkilled_when_the_grace_period_ends(node):
    node.launch("stubborn", 1, "trap '' TERM; echo ready; sleep 60", grace_period=0.5)
    started = node.reports.wait(protocol.REPORT_STARTED, job_id="stubborn")
    node.reports.wait_log("stubborn", 1, lambda l: l == "ready", "ready")
    node.send(protocol.AGENT_PREEMPT, job_id="stubborn", attempt=1, grace_period=0.5)
    exited = node.reports.wait(protocol.REPORT_EXITED, job_id="stubborn")
    assert exited["signal"] == signal.SIGKILL and exited["exit_code"] is None
    assert exited["checkpointed"] is False
    assert exited["reason"] == protocol.EXIT_PREEMPT
    assert not group_alive(started["pid"])


def test_time_limit_is_enforced_on_the_node(node):
    node.launch("slow", 1, "echo begin; sleep 60", time_limit=0.5, grace_period=0.5)
    exited = node.reports.wait(protocol.REPORT_EXITED, job_id="slow")
    assert exited["reason"] == protocol.EXIT_TIMEOUT
    assert exited["signal"] == signal.SIGTERM
    assert exited["notice_at"] is not None
    assert node.reports.log_lines("slow", 1) == ["begin"]


def test_cancel_kills_with_the_given_reason(node):
    node.launch("cx", 1, train_command(TRAIN_STEPS=100000, TRAIN_SLEEP=0.01), grace_period=20)
    node.reports.wait_log("cx", 1, lambda l: l.startswith("step 2/"), "step 2")
    node.send(protocol.AGENT_KILL, job_id="cx", attempt=1, grace_period=20, reason="cancel")
    exited = node.reports.wait(protocol.REPORT_EXITED, job_id="cx")
    assert (exited["reason"], exited["exit_code"], exited["checkpointed"]) == ("cancel", 143, True)


def test_commands_are_idempotent_by_job_and_attempt(node):
    # A repeated launch of a running attempt starts nothing; it reports the same start again.
    node.launch("idem", 1, "echo run-1; sleep 60")
    node.launch("idem", 1, "echo run-1; sleep 60")
    # Commands are handled in order, so once "marker" has started both were handled.
    node.launch("marker", 1, "sleep 60")
    node.reports.wait(protocol.REPORT_STARTED, job_id="marker")
    first, again = node.reports.all(protocol.REPORT_STARTED, job_id="idem", attempt=1)
    assert again == first
    node.reports.wait_log("idem", 1, lambda line: line == "run-1", "run-1")

    # A newer attempt replaces an older one still running here (which is stale).
    node.launch("idem", 2, "echo run-2; sleep 60")
    stale = node.reports.wait(protocol.REPORT_EXITED, job_id="idem", attempt=1)
    assert stale["reason"] == protocol.EXIT_STALE
    node.reports.wait(protocol.REPORT_STARTED, job_id="idem", attempt=2)

    # A launch of an older attempt is refused; a preempt of an unknown attempt does nothing.
    node.launch("idem", 1, "echo run-1-again; sleep 60")
    node.send(protocol.AGENT_PREEMPT, job_id="idem", attempt=7, grace_period=0)
    node.launch("marker2", 1, "true")
    node.reports.wait(protocol.REPORT_EXITED, job_id="marker2")
    assert len(node.reports.all(protocol.REPORT_STARTED, job_id="idem", attempt=1)) == 2
    assert node.reports.log_lines("idem", 1) == ["run-1"]  # one process ran it
    assert node.reports.all(protocol.REPORT_EXITED, job_id="idem", attempt=7) == []
    hb = node.reports.wait_heartbeat(lambda hb: True, "any")
    assert sorted(hb["running"]) == [["idem", 2], ["marker", 1]]


def test_a_repeated_preempt_signals_once(node):
    counter = (
        f"{PY} -c \"import signal, time\n"
        "signal.signal(signal.SIGTERM, lambda *a: print('TERM', flush=True))\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\""
    )
    node.launch("twice", 1, f"exec {counter}", grace_period=1.0)
    node.reports.wait_log("twice", 1, lambda l: l == "ready", "ready")
    node.send(protocol.AGENT_PREEMPT, job_id="twice", attempt=1, grace_period=1.0)
    node.send(protocol.AGENT_PREEMPT, job_id="twice", attempt=1, grace_period=1.0)
    exited = node.reports.wait(protocol.REPORT_EXITED, job_id="twice")
    assert exited["signal"] == signal.SIGKILL
    assert node.reports.log_lines("twice", 1).count("TERM") == 1


def test_reconcile_kills_attempts_the_server_does_not_expect(node):
    node.launch("keep-me", 1, "sleep 60")
    node.launch("stale-one", 4, "sleep 60")
    node.reports.wait(protocol.REPORT_STARTED, job_id="stale-one")
    node.send(protocol.AGENT_RECONCILE, keep=[["keep-me", 1]])
    exited = node.reports.wait(protocol.REPORT_EXITED, job_id="stale-one", attempt=4)
    assert exited["reason"] == protocol.EXIT_STALE
    hb = node.reports.wait_heartbeat(lambda hb: True, "any")
    assert hb["running"] == [["keep-me", 1]]


def test_integer_job_ids_are_echoed_back_unchanged(node):
    node.launch(42, 1, "echo $GPUSCHED_JOB_ID")
    exited = node.reports.wait(protocol.REPORT_EXITED, job_id=42)
    assert exited["exit_code"] == 0
    assert node.reports.log_lines(42, 1) == ["42"]


def test_launch_on_a_gpu_the_node_does_not_have_fails_with_a_reason(node):
    node.launch("bad-gpu", 1, "echo never", gpu_indices=[5])
    exited = node.reports.wait(protocol.REPORT_EXITED, job_id="bad-gpu")
    assert exited["reason"] == protocol.EXIT_LAUNCH_FAILED
    assert node.reports.all(protocol.REPORT_STARTED, job_id="bad-gpu") == []
    assert "gpu_indices [5] do not exist" in node.reports.log_lines("bad-gpu", 1)[0]


def test_restarted_agent_readopts_running_jobs_and_reports_their_real_exit(make_node):
    n = make_node()
    n.start()
    settings = {"TRAIN_STEPS": 100000, "TRAIN_SLEEP": 0.02, "TRAIN_EVAL_EVERY": 0}
    n.launch("survivor", 1, train_command(**settings), grace_period=30)
    # Finishes while no agent is watching: it waits for a file, then exits 7.
    n.launch("finisher", 1, "while [ ! -e go ]; do sleep 0.05; done; echo finishing; exit 7")
    survivor = n.reports.wait(protocol.REPORT_STARTED, job_id="survivor")
    finisher = n.reports.wait(protocol.REPORT_STARTED, job_id="finisher")
    n.reports.wait_log("survivor", 1, lambda l: l.startswith("step 5/"), "step 5")

    n.stop_agent(signal.SIGKILL)
    assert group_alive(survivor["pid"]) and group_alive(finisher["pid"])
    (n.job_dir("finisher") / "work" / "go").touch()
    wait_until(lambda: not group_alive(finisher["pid"]), what="finisher to end")

    n.start()
    n.reports.wait(protocol.REPORT_REGISTER)
    done = n.reports.wait(protocol.REPORT_EXITED, job_id="finisher")
    assert (done["exit_code"], done["signal"], done["reason"]) == (7, None, None)
    assert "finishing" in n.reports.log_lines("finisher", 1)
    n.reports.wait_heartbeat(lambda hb: hb["running"] == [["survivor", 1]], "survivor re-adopted")

    # The new agent can still stop it, and learns its exact exit status.
    n.send(protocol.AGENT_PREEMPT, job_id="survivor", attempt=1, grace_period=30)
    exited = n.reports.wait(protocol.REPORT_EXITED, job_id="survivor")
    assert (exited["exit_code"], exited["checkpointed"], exited["reason"]) == (143, True, protocol.EXIT_PREEMPT)
    lines = n.reports.log_lines("survivor", 1)
    saved_at = int(lines[-1].split("checkpoint saved at step ")[1].split()[0])
    # Every line the job printed was streamed once, across both agent processes.
    assert step_numbers(lines) == list(range(1, saved_at + 1))
    assert not group_alive(survivor["pid"])
    # A repeated launch of the finished attempt is refused by the new agent too.
    n.launch("finisher", 1, "echo again")
    n.launch("marker", 1, "true")
    n.reports.wait(protocol.REPORT_EXITED, job_id="marker")
    assert len(n.reports.all(protocol.REPORT_STARTED, job_id="finisher")) == 1


def test_kill_jobs_on_exit_stops_and_reports_jobs_before_the_agent_exits(make_node):
    n = make_node("--kill-jobs-on-exit")
    n.start()
    n.launch("drain", 1, train_command(TRAIN_STEPS=100000, TRAIN_SLEEP=0.01), grace_period=30)
    started = n.reports.wait(protocol.REPORT_STARTED, job_id="drain")
    n.reports.wait_log("drain", 1, lambda l: l.startswith("step 2/"), "step 2")
    assert n.stop_agent(signal.SIGTERM) == 0
    exited = n.reports.wait(protocol.REPORT_EXITED, job_id="drain")
    assert (exited["reason"], exited["checkpointed"]) == (protocol.EXIT_AGENT_STOP, True)
    assert not group_alive(started["pid"])
    state = json.loads((n.workdir / "agent-state.json").read_text())
    assert state["attempts"] == [] and state["outbox"] == []


def test_a_second_agent_on_the_same_workdir_is_refused(node):
    result = subprocess.run(
        [PY, "-m", "cluster.agent", "--name", node.name, "--gpus", "1", "--broker", node.url, "--workdir", str(node.workdir)],
        capture_output=True, text=True, timeout=60, cwd=str(TRAIN.parents[1]),
    )
    assert result.returncode == 2
    assert "another agent is running with work dir" in result.stderr
    assert node.agent.poll() is None


def test_with_a_shared_checkpoint_root_a_job_resumes_on_another_node(make_node, tmp_path):
    shared = tmp_path / "shared-checkpoints"
    a, b = make_node("--checkpoint-root", str(shared)), make_node("--checkpoint-root", str(shared))
    a.start()
    b.start()
    settings = {"TRAIN_STEPS": 80, "TRAIN_SLEEP": 0.02, "TRAIN_EVAL_EVERY": 0}
    a.launch("mover", 1, train_command(**settings), grace_period=30)
    a.reports.wait_log("mover", 1, lambda l: l.startswith("step 10/"), "step 10")
    a.send(protocol.AGENT_PREEMPT, job_id="mover", attempt=1, grace_period=30)
    assert a.reports.wait(protocol.REPORT_EXITED, job_id="mover")["checkpointed"] is True
    saved_at = step_numbers(a.reports.log_lines("mover", 1))[-1]

    b.launch("mover", 2, train_command(**settings), grace_period=30, resume=True)
    assert b.reports.wait(protocol.REPORT_EXITED, job_id="mover", attempt=2)["exit_code"] == 0
    assert step_numbers(b.reports.log_lines("mover", 2)) == list(range(saved_at + 1, 81))


def test_a_workdir_of_another_node_is_refused(make_node):
    first = make_node()
    first.start()
    first.reports.wait(protocol.REPORT_REGISTER)
    first.stop_agent(signal.SIGTERM)
    result = subprocess.run(
        [PY, "-m", "cluster.agent", "--name", "someone-else", "--gpus", "1", "--broker", first.url,
         "--workdir", str(first.workdir)],
        capture_output=True, text=True, timeout=60, cwd=str(TRAIN.parents[1]),
    )
    assert result.returncode == 2
    assert f"belongs to node {first.name!r}" in result.stderr
