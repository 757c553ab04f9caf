"""The per-attempt shim and the example jobs, run as plain processes (no agent, no broker)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.cluster.agent.agent_testlib import PY, SHELL_EXAMPLE, TRAIN, group_alive, kill_group, step_numbers, wait_until

from cluster import protocol
from cluster.agent import procs

# ----- shim ---------------------------------------------------------------------------------


def run_shim(tmp_path: Path, command: str) -> tuple[int, dict]:
    exit_file = tmp_path / "attempt.exit"
    proc = subprocess.run([PY, "-I", "-S", str(procs.SHIM_PATH), str(exit_file), str(tmp_path), "--", "/bin/sh", "-c", command],
                          capture_output=True, text=True, timeout=60)
    return proc.returncode, json.loads(exit_file.read_text())


def test_shim_records_exit_code_and_signal(tmp_path):
    _, record = run_shim(tmp_path, "exit 4")
    assert record["main"]["exit_code"] == 4 and record["done"] is True
    _, record = run_shim(tmp_path, "kill -INT $$")
    assert record["main"] == {**record["main"], "exit_code": None, "signal": signal.SIGINT}


def test_shim_waits_for_orphaned_descendants(tmp_path):
    # The command exits at once; its background child writes a file later.
    rc, record = run_shim(tmp_path, "(sleep 0.3; echo late > late.txt) & exit 0")
    assert rc == 0 and record["done"] is True
    assert (tmp_path / "late.txt").read_text() == "late\n"
    assert record["ended_at"] >= record["main"]["at"]


def test_shim_reports_a_command_it_cannot_start(tmp_path):
    exit_file = tmp_path / "x.exit"
    proc = subprocess.run([PY, "-I", "-S", str(procs.SHIM_PATH), str(exit_file), str(tmp_path / "missing-dir"), "--", "true"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 127
    assert "missing-dir" in proc.stderr
    assert json.loads(exit_file.read_text())["main"]["exit_code"] == 127


def test_a_notice_during_shim_startup_reaches_the_job_not_the_shim(tmp_path):
    handle = procs.spawn("sleep 60", cwd=tmp_path, env=dict(os.environ), log_path=tmp_path / "log", exit_path=tmp_path / "exit")
    try:
        os.killpg(handle.pid, signal.SIGTERM)  # almost certainly before the shim has its handlers
        wait_until(lambda: not handle.alive(), what="shim to end")
        assert handle.wait_status() == 0
        assert json.loads((tmp_path / "exit").read_text())["main"]["signal"] == signal.SIGTERM
    finally:
        kill_group(handle.pid)


def test_spawned_group_is_its_own_session_with_default_sigpipe(tmp_path):
    handle = procs.spawn("grep -E '^(SigIgn|SigBlk)' /proc/self/status; cut -d' ' -f6 /proc/$$/stat", cwd=tmp_path, env=dict(os.environ),
                         log_path=tmp_path / "log", exit_path=tmp_path / "exit")
    wait_until(lambda: not handle.alive(), what="shim to end")
    out = (tmp_path / "log").read_text().split()
    sig_ign, sig_blk = int(out[1], 16), int(out[3], 16)
    assert not sig_ign & (1 << (signal.SIGPIPE - 1))
    assert not sig_blk & (1 << (signal.SIGTERM - 1))
    assert int(out[4]) == handle.pid
    assert not group_alive(handle.pid)


# ----- examples/train_numpy.py -------------------------------------------------------------------


def train(tmp_path: Path, ckpt: str = "ck", resume: bool = False, **settings) -> subprocess.Popen:
    env = {**os.environ, "CHECKPOINT_DIR": str(tmp_path / ckpt), "RESUME": "1" if resume else "0",
           **{k: str(v) for k, v in settings.items()}}
    return subprocess.Popen([PY, str(TRAIN)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def run_train(tmp_path: Path, **kw) -> tuple[int, list[str], str]:
    proc = train(tmp_path, **kw)
    out, err = proc.communicate(timeout=120)
    return proc.returncode, out.splitlines(), err


def interrupt_at(proc: subprocess.Popen, step: int) -> list[str]:
    lines = []
    for line in proc.stdout:
        lines.append(line.rstrip("\n"))
        if line.startswith(f"step {step}/"):
            proc.send_signal(signal.SIGTERM)
            break
    rest, _ = proc.communicate(timeout=60)
    return lines + rest.splitlines()


def test_train_numpy_learns_the_spirals(tmp_path):
    rc, lines, _ = run_train(tmp_path, TRAIN_STEPS=300, TRAIN_SLEEP=0)
    assert rc == 0
    evals = [float(l.split("val_acc=")[1]) for l in lines if l.startswith("eval ")]
    assert evals[-1] > 0.9 and evals[-1] > evals[0]
    losses = [float(l.split("loss=")[1].split()[0]) for l in lines if l.startswith("step ")]
    assert sum(losses[-20:]) < sum(losses[:20])


def test_train_numpy_resumes_exactly_where_it_stopped(tmp_path):
    settings = {"TRAIN_STEPS": 120, "TRAIN_SLEEP": 0.005, "TRAIN_SEED": 3}
    rc_ref, ref, _ = run_train(tmp_path, ckpt="ref", **settings)
    assert rc_ref == 0

    first = train(tmp_path, **settings)
    lines1 = interrupt_at(first, 40)
    assert first.returncode == 143
    saved = int(lines1[-1].split("checkpoint saved at step ")[1].split()[0])
    assert step_numbers(lines1) == list(range(1, saved + 1))
    marker = tmp_path / "ck" / protocol.CHECKPOINT_MARKER
    assert marker.read_text() == f"{saved}\n"

    rc, lines2, _ = run_train(tmp_path, resume=True, **settings)
    assert rc == 0
    assert step_numbers(lines2) == list(range(saved + 1, 121))
    # Same losses step for step, same final weights: nothing repeated, nothing skipped.
    assert [l for l in lines1 if l.startswith("step ")] + [l for l in lines2 if l.startswith("step ")] == \
        [l for l in ref if l.startswith("step ")]
    assert lines2[-1] == ref[-1]


def test_train_numpy_periodic_checkpoints_bound_the_work_lost_to_sigkill(tmp_path):
    proc = train(tmp_path, TRAIN_STEPS=100000, TRAIN_SLEEP=0.005, CHECKPOINT_EVERY=10)
    for line in proc.stdout:
        if line.startswith("step 25/"):
            proc.kill()
            break
    proc.communicate(timeout=60)
    rc, lines, _ = run_train(tmp_path, resume=True, TRAIN_STEPS=30, TRAIN_SLEEP=0, CHECKPOINT_EVERY=10)
    assert rc == 0
    assert lines[0].startswith("resumed from checkpoint at step 20")
    assert step_numbers(lines)[0] == 21


def test_train_numpy_without_checkpoint_starts_fresh_and_refuses_foreign_checkpoints(tmp_path):
    rc, lines, _ = run_train(tmp_path, resume=True, TRAIN_STEPS=2, TRAIN_SLEEP=0)
    assert rc == 0 and lines[0].startswith("RESUME=1 but no checkpoint") and step_numbers(lines) == [1, 2]
    rc, _, err = run_train(tmp_path, resume=True, TRAIN_STEPS=4, TRAIN_SLEEP=0, TRAIN_HIDDEN=8)
    assert rc != 0 and "made with other settings" in err


def test_train_numpy_rejects_bad_settings(tmp_path):
    rc, _, err = run_train(tmp_path, TRAIN_STEPS=0)
    assert rc == 2 and "--steps must be >= 1" in err


def test_train_numpy_marker_is_the_agents_marker():
    sys.path.insert(0, str(TRAIN.parent))
    try:
        import train_numpy
    finally:
        sys.path.pop(0)
    assert train_numpy.CHECKPOINT_MARKER == protocol.CHECKPOINT_MARKER


# ----- examples/sleep_and_checkpoint.sh ------------------------------------------------------------------------


def test_shell_example_saves_on_sigterm_and_resumes(tmp_path):
    env = {**os.environ, "CHECKPOINT_DIR": str(tmp_path / "ck"), "STEPS": "1000", "SLEEP_PER_STEP": "0.02"}
    proc = subprocess.Popen(["sh", str(SHELL_EXAMPLE)], env=env, stdout=subprocess.PIPE, text=True)
    for line in proc.stdout:
        if line.strip() == "step 5/1000":
            proc.send_signal(signal.SIGTERM)
            break
    rest, _ = proc.communicate(timeout=60)
    assert proc.returncode == 143
    saved = int((tmp_path / "ck" / "step").read_text())
    assert saved >= 5 and f"checkpoint saved at step {saved}; exiting" in rest
    assert (tmp_path / "ck" / protocol.CHECKPOINT_MARKER).exists()

    done = subprocess.run(["sh", str(SHELL_EXAMPLE)], env={**env, "RESUME": "1", "STEPS": str(saved + 2), "SLEEP_PER_STEP": "0"},
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0
    assert done.stdout.splitlines() == [f"resumed from checkpoint at step {saved}", f"step {saved + 1}/{saved + 2}",
                                        f"step {saved + 2}/{saved + 2}", f"done step={saved + 2}"]
