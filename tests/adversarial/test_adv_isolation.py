"""Hostile jobs against a confined node: a job of user A attacks, each test one attack.

Every attack must fail while A's own job still succeeds (it reports what it
tried and exits 0). Everything is real: the supervisor with its shim, two
POSIX users (created with useradd), the host's cgroups, and for the agent's
secrets a real agent process. Root is required (skipped without it, failed
under CI=true).
"""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from cluster import protocol
from cluster.agent import procs
from cluster.agent.cgroups import NVIDIA_MAJOR
from tests.cluster.agent.agent_testlib import group_alive, kill_group, wait_until
from tests.cluster.agent.confined import USER_A, USER_B, ConfinedAgent, ConfinedNode, ensure_users

pytestmark = pytest.mark.skipif(not hasattr(os, "geteuid"), reason="POSIX only")


@pytest.fixture
def users():
    return ensure_users()


@pytest.fixture
def node(users):
    confined = ConfinedNode(pids_max=64)
    yield confined
    confined.cleanup()


def _dead(pid: int) -> bool:
    """Gone, or a zombie waiting for its reaper: either way it runs no more."""
    stat_ = procs.proc_stat(pid)
    return stat_ is None or stat_[0] in ("Z", "X")


def _ok(node: ConfinedNode, job: str) -> dict:
    ex = node.exited(job)
    assert (ex["exit_code"], ex["reason"]) == (0, None), (ex, node.lines(job))
    return ex


def _secret_job(node: ConfinedNode, job: str = "b-secret") -> None:
    """B's job: writes secrets into its work dir, checkpoint and log, then waits."""
    assert node.launch(job, 'echo log-secret-b; echo work-secret-b > mine; echo ckpt-secret-b > "$CHECKPOINT_DIR/ckpt";'
                            ' echo ready; sleep 30', user=USER_B) == "started"
    node.wait_line(job, "ready")


def test_a_job_cannot_read_another_users_files_checkpoint_or_log(node):
    _secret_job(node)
    b_dir = node.sup.launcher.job_dir("b-secret")
    targets = [b_dir / "work" / "mine", node.sup.checkpoint_root / "b-secret" / "ckpt", b_dir / "attempt-1.log"]
    attack = "; ".join(f'cat {t} 2>/dev/null && echo "LEAK {t}" || echo "denied {t.name}"' for t in targets)
    assert node.launch("a-read", attack + "; ls " + str(b_dir) + " >/dev/null 2>&1 && echo LEAK-LIST || echo denied-list") == "started"
    _ok(node, "a-read")
    text = "\n".join(node.lines("a-read"))
    assert "LEAK" not in text and "secret" not in text
    assert text.count("denied") == 4


def test_a_job_of_a_new_database_gets_none_of_a_reused_ids_checkpoints(node):
    """Job ids start again at 1 in a new server database; the checkpoint root outlives it."""
    write = protocol.LaunchCommand(job_id="1", attempt=1, run_as=USER_B,
                                   command='echo b-weights > "$CHECKPOINT_DIR/model.pt"; chmod 644 "$CHECKPOINT_DIR/model.pt"')
    assert node.sup.launch({**write.to_kwargs(), "cluster_id": "cluster-of-the-old-database"}) == "started"
    _ok(node, "1")
    probe = protocol.LaunchCommand(job_id="1", attempt=2, run_as=USER_A,
                                   command='ls -A "$CHECKPOINT_DIR"; cat "$CHECKPOINT_DIR/model.pt" 2>/dev/null; '
                                           f'ls {node.sup.checkpoint_root}/.previous-clusters 2>/dev/null || echo denied')
    assert node.sup.launch({**probe.to_kwargs(), "cluster_id": "cluster-of-the-new-database"}) == "started"
    wait_until(lambda: node.step() or any(kw["attempt"] == 2 for kw in node.of(protocol.REPORT_EXITED, "1")),
               what="attempt 2 to end")
    text = "\n".join(line for kw in node.of(protocol.REPORT_LOG, "1") if kw["attempt"] == 2 for line in kw["lines"])
    assert "b-weights" not in text and "model.pt" not in text and text.strip() == "denied", text


@pytest.fixture
def agent(users):
    confined = ConfinedAgent()
    yield confined.node
    confined.cleanup()


def test_a_job_cannot_read_the_agents_environment_token_or_state(agent):
    agent.token = "agent-token-that-no-job-may-see"
    agent.start()
    agent.reports.wait(protocol.REPORT_REGISTER)
    pid = agent.agent.pid
    paths = [f"/proc/{pid}/environ", agent.workdir / "agent-state.json", agent.workdir / "agent.lock"]
    attack = "; ".join(f'cat {p} 2>/dev/null | tr "\\0" "\\n" | grep -c . >/dev/null && echo "LEAK {p}" || echo denied'
                       for p in paths)
    attack += f'; env | grep -i -e token -e redis -e broker -e secret_key && echo LEAK-ENV || echo denied'
    attack += f'; ls {agent.workdir} >/dev/null 2>&1 && echo LEAK-LIST || echo denied'
    agent.launch("a-agent", 1, attack, run_as=USER_A)
    ex = agent.reports.wait(protocol.REPORT_EXITED, job_id="a-agent")
    lines = agent.reports.log_lines("a-agent", 1)
    assert ex["exit_code"] == 0 and ex["reason"] is None, lines
    assert not [line for line in lines if "LEAK" in line or agent.token in line], lines
    assert lines.count("denied") == 5, lines
    assert stat.S_IMODE((agent.workdir / "agent-state.json").stat().st_mode) == 0o600


def test_a_job_cannot_signal_another_users_job_or_the_agent(node):
    _secret_job(node)
    victim = node.pgid("b-secret")
    attack = (f"kill -KILL -- -{victim} 2>/dev/null && echo LEAK-group || echo denied; "
              f"kill -KILL {victim} 2>/dev/null && echo LEAK-pid || echo denied; "
              f"kill -TERM {os.getpid()} 2>/dev/null && echo LEAK-agent || echo denied")
    assert node.launch("a-kill", attack) == "started"
    _ok(node, "a-kill")
    assert node.lines("a-kill") == ["denied", "denied", "denied"]
    assert group_alive(victim) and ("b-secret", 1) in node.sup.attempts


def test_a_job_cannot_leave_its_cgroup(node):
    escapes = [Path(f"/sys/fs/cgroup/{c}/cgroup.procs") for c in ("memory", "pids", "cpu", "devices")]
    escapes += [base.parent / "cgroup.procs" for base in node.sup.cgroups.bases.values()]
    attack = "; ".join(f"(echo $$ > {p}) 2>/dev/null && echo LEAK-{i} || echo denied" for i, p in enumerate(escapes))
    attack += "; cat /proc/self/cgroup"
    assert node.launch("a-escape", attack) == "started"
    _ok(node, "a-escape")
    lines = node.lines("a-escape")
    assert lines[: len(escapes)] == ["denied"] * len(escapes)
    memory_line = next(line for line in lines if ":memory:" in line)
    assert memory_line.endswith("/a-escape@1")


def test_allocating_past_the_memory_limit_ends_as_out_of_memory_and_the_neighbour_lives(node):
    assert node.launch("b-neighbour", "sleep 2; echo neighbour-ok", user=USER_B, mem_bytes=64 << 20) == "started"
    hog = "python3 -c 'import time; x = [bytearray(16 << 20) for _ in range(32)]; print(\"LEAK\")'"
    assert node.launch("a-hog", hog, mem_bytes=64 << 20) == "started"
    ex = node.exited("a-hog")
    assert ex["reason"] == protocol.EXIT_OUT_OF_MEMORY and ex["exit_code"] != 0
    assert ex["peak_mem_bytes"] is not None and ex["peak_mem_bytes"] <= 64 << 20
    assert "LEAK" not in node.lines("a-hog")
    _ok(node, "b-neighbour")
    assert "neighbour-ok" in node.lines("b-neighbour")


def test_a_fork_bomb_is_capped_by_the_pids_limit_and_the_node_stays_responsive(node):
    bomb = "python3 -c '\nimport os, time\nn = 0\ntry:\n    while True:\n        if os.fork() == 0:\n            time.sleep(60); os._exit(0)\n        n += 1\nexcept OSError as e:\n    print(\"capped at\", n, e.errno, flush=True)\ntime.sleep(60)\n'"
    assert node.launch("a-bomb", bomb, grace_period=0.0) == "started"
    node.wait_line("a-bomb", "capped at")
    capped = next(line for line in node.lines("a-bomb") if line.startswith("capped at"))
    assert int(capped.split()[2]) < 64
    assert node.launch("b-alive", "echo still-works", user=USER_B) == "started"
    _ok(node, "b-alive")
    cgroup = node.sup.cgroups.attempt("a-bomb", 1)
    assert len(cgroup.pids()) > 32
    node.sup.kill({"job_id": "a-bomb", "attempt": 1, "grace_period": 0.0, "reason": "cancel"})
    assert node.exited("a-bomb")["reason"] == "cancel"
    assert not cgroup.exists()


def test_a_double_forked_daemon_dies_with_its_attempt(node, tmp_path):
    daemon = ("python3 -c '\nimport os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
              "        import signal; signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
              "        print(\"daemon\", os.getpid(), flush=True); time.sleep(600)\n    os._exit(0)\ntime.sleep(0.5)\n'")
    assert node.launch("a-daemon", daemon, grace_period=0.5) == "started"
    node.wait_line("a-daemon", "daemon ")
    pid = int(next(line for line in node.lines("a-daemon") if line.startswith("daemon ")).split()[1])
    assert os.getpgid(pid) != node.pgid("a-daemon")  # out of the job's process group: SIGKILL to it misses
    ex = node.exited("a-daemon")
    assert ex["exit_code"] == 0
    assert _dead(pid)


def test_exec_of_a_setuid_binary_gains_no_privilege(node):
    tools = Path(tempfile.mkdtemp(prefix="gpusched-setuid-"))
    try:
        os.chmod(tools, 0o755)
        suid_id = tools / "id"
        subprocess.run(["cp", "/usr/bin/id", str(suid_id)], check=True)
        os.chown(suid_id, 0, 0)
        os.chmod(suid_id, 0o4755)
        # Control: without no_new_privs the copy does make user A root, so the test can fail.
        control = subprocess.run(["setpriv", f"--reuid={USER_A}", f"--regid={USER_A}", "--clear-groups", str(suid_id), "-u"],
                                 capture_output=True, text=True)
        assert control.stdout.strip() == "0", control
        attack = f"{suid_id} -u; su -c id root </dev/null 2>/dev/null && echo LEAK-su || echo denied"
        assert node.launch("a-suid", attack) == "started"
        _ok(node, "a-suid")
        euid, verdict = node.lines("a-suid")
        assert int(euid) == os.stat(node.sup.launcher.job_dir("a-suid") / "work").st_uid != 0
        assert verdict == "denied"
    finally:
        subprocess.run(["rm", "-rf", str(tools)])


def test_a_job_cannot_open_a_gpu_device_that_is_not_its_own(node):
    devices = Path(tempfile.mkdtemp(prefix="gpusched-dev-"))
    try:
        os.chmod(devices, 0o755)
        for minor in (0, 1):
            os.mknod(devices / f"nvidia{minor}", 0o666 | stat.S_IFCHR, os.makedev(NVIDIA_MAJOR, minor))
            os.chmod(devices / f"nvidia{minor}", 0o666)  # mknod's mode is masked by the umask
        probe = ("python3 -c '\nimport os\nfor n in (0, 1):\n    try:\n        os.open(\"%s/nvidia%%d\" %% n, os.O_RDWR)\n"
                 "        print(n, \"opened\")\n    except OSError as e:\n        print(n, os.strerror(e.errno))\n'") % devices
        assert node.launch("a-gpu", probe, gpu_indices=[0]) == "started"
        _ok(node, "a-gpu")
        # Its own GPU passes the cgroup (the fake node has no driver behind it: ENXIO); GPU 1 is refused (EPERM).
        assert node.lines("a-gpu") == [f"0 {os.strerror(6)}", f"1 {os.strerror(1)}"]
    finally:
        subprocess.run(["rm", "-rf", str(devices)])


def test_an_unknown_image_ends_as_image_unavailable(node):
    missing = "/nonexistent/images/none.tar"
    assert node.launch("a-image", "true", image="none", image_uri=missing, image_digest="sha256:" + "0" * 64) == "failed"
    ex = node.exited("a-image")
    assert ex["reason"] == protocol.EXIT_IMAGE_UNAVAILABLE and missing in ex["message"]


def test_a_launch_as_root_a_system_account_or_nobody_is_refused(node):
    for job, user in (("as-root", "root"), ("as-daemon", "daemon"), ("as-empty", ""), ("as-ghost", "no-such-user-x")):
        assert node.launch(job, "id", user=user) == "failed"
        ex = node.exited(job)
        assert ex["reason"] == protocol.EXIT_LAUNCH_FAILED and "run_as" in ex["message"], ex


def test_an_agent_restart_leaves_no_job_running_outside_control(agent):
    agent.start()
    daemon = ("python3 -c '\nimport os, time\nif os.fork() == 0:\n    os.setsid()\n    print(\"daemon\", os.getpid(), flush=True)\n"
              "    time.sleep(600)\ntime.sleep(600)\n'")
    agent.launch("a-left", 1, daemon, run_as=USER_A)
    line = wait_until(lambda: next((l for l in agent.reports.log_lines("a-left", 1) if l.startswith("daemon ")), None),
                      what="the daemon to start")
    pid = int(line.split()[1])
    shim = agent.reports.wait(protocol.REPORT_STARTED, job_id="a-left")["pid"]
    agent.stop_agent(signal.SIGKILL)
    # The state is lost and the shim is gone: nothing but its cgroup knows the daemon belongs to a job.
    (agent.workdir / "agent-state.json").unlink()
    kill_group(shim)
    assert Path(f"/proc/{pid}").exists()
    agent.start()
    agent.reports.wait(protocol.REPORT_REGISTER)
    wait_until(lambda: not Path(f"/proc/{pid}").exists(), what="the leftover daemon to be killed")
