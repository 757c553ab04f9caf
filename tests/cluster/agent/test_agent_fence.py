"""The agent's side of fencing: cut off from the broker, it holds its lease at the last heartbeat that got through,
so its jobs are fenced with their grace period, and their exits are reported lost once the broker is back."""

from __future__ import annotations

import json
import time
from pathlib import Path

from cluster import protocol
from cluster.agent import shim

SHIM = Path(shim.__file__)


def test_an_agent_cut_off_from_the_broker_has_its_jobs_fenced_with_their_grace_and_reports_them_lost(
        private_redis, make_node) -> None:
    """The broker goes away under a running agent (fence 4 s). The agent holds its lease at the last
    heartbeat that got through, so the job's shim gives it SIGTERM 3 s after that heartbeat (its grace
    period is 1 s) and would SIGKILL it at 4 s: the job checkpoints and exits while the broker is still
    away. Once the broker is back the exit is reported as lost (so the server requeues the job),
    checkpointed, with the job's last log lines before it."""
    from tests.cluster.agent.agent_testlib import ReportReader

    n = make_node("--fence-after", "4", url=private_redis.url)
    n.start()
    n.reports.wait(protocol.REPORT_REGISTER)
    n.launch("cut", 1, "trap 'echo saved; touch $CHECKPOINT_DIR/.checkpoint-complete; exit 0' TERM; "
                       "echo running; sleep 300 & wait", grace_period=1)
    n.reports.wait(protocol.REPORT_STARTED, job_id="cut")
    private_redis.stop()
    exit_file = n.job_dir("cut") / "attempt-1.exit"
    deadline = time.monotonic() + 120
    while not (exit_file.exists() and json.loads(exit_file.read_text()).get("done")):
        assert time.monotonic() < deadline, n.agent_output()[-3000:]
        time.sleep(0.2)
    record = json.loads(exit_file.read_text())
    assert record["fenced"] is True and record["main"]["exit_code"] == 0
    assert n.agent.poll() is None
    private_redis.start()
    n.reports.close()
    n.reports = ReportReader(private_redis.url, n.name, n.report_queue)
    exited = n.reports.wait(protocol.REPORT_EXITED, job_id="cut")
    assert (exited["exit_code"], exited["signal"], exited["reason"]) == (0, None, protocol.EXIT_LOST)
    assert exited["checkpointed"] is True
    assert n.reports.log_lines("cut", 1)[-1] == "saved"
    assert "broker unreachable: unless a heartbeat gets through first" in n.agent_output()


def test_a_launch_after_a_stall_renews_the_lease_so_the_new_job_is_not_fenced_at_once(tmp_path) -> None:
    """An agent handling a launch right after a stall longer than its fence period (paused, starved of
    CPU) used to leave the lease stale until its loop came round again, and the new job's shim, finding
    it stale at its first check, SIGKILLed the job it had just started. Here nothing renews the lease
    but the launch itself (the agent's loop does not run): the job must outlive the shim's checks."""
    import os

    from cluster.agent.agent import Agent
    from cluster.agent.config import parse_args
    from cluster.agent.resources import discover
    from tests.cluster.agent.agent_testlib import wait_until

    workdir = tmp_path / "work"
    workdir.mkdir()
    config = parse_args(["--name", "stalled", "--gpus", "1", "--broker", "redis://127.0.0.1:9/0", "--workdir",
                         str(workdir), "--fence-after", "4", "--single-user"], environ={})
    agent = Agent(config, discover(config.gpus, config.cpus, config.mem_gb))

    class Connected:
        connected = True

    agent.broker = Connected()  # type: ignore[assignment]  # the launch came through the broker
    stale = time.time() - 10.0
    agent.lease_path.touch()
    os.utime(agent.lease_path, (stale, stale))
    before = time.time()
    cmd = protocol.LaunchCommand(job_id=7, attempt=1, command="echo started; sleep 30", grace_period=1)
    assert agent._launch(cmd.to_kwargs()) == "started"
    assert agent.lease_path.stat().st_mtime >= before - 0.01
    try:
        (att,) = agent.supervisor.attempts.values()
        # The shim checks the lease every second (a quarter of the fence period, at most 1 s) and gives
        # notice at 3 s of age: by 1.5 s it has checked once, and a fresh lease is not yet due a notice.
        time.sleep(1.5)
        agent.supervisor.tick()
        assert att.key in agent.supervisor.attempts and att.handle.alive()
        assert not (workdir / "jobs" / "7" / "attempt-1.exit").exists()
    finally:
        agent.supervisor.stop_all("stop")
        wait_until(lambda: (agent.supervisor.tick(), not agent.supervisor.attempts)[1], what="the job to stop")
