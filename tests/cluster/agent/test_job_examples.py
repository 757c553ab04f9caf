"""The example jobs the agent runs (examples/train_numpy.py, examples/sleep_and_checkpoint.sh), run as plain
processes: they learn, checkpoint on the notice, resume exactly where they stopped, and keep a reconfigurable
job's global batch (GPUSCHED_PLAN, GPUSCHED_NUM_GPUS, GPUSCHED_GRAD_ACCUM_STEPS)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from tests.cluster.agent.agent_testlib import PY, SHELL_EXAMPLE, TRAIN, step_numbers

from cluster import protocol


def _train(tmp_path: Path, resume: bool, **settings: object) -> list[str]:
    env = {**os.environ, "CHECKPOINT_DIR": str(tmp_path / "ck"), "RESUME": "1" if resume else "0",
           "TRAIN_SLEEP": "0", **{k: str(v) for k, v in settings.items()}}
    out = subprocess.run([PY, str(TRAIN)], env=env, capture_output=True, text=True, timeout=120, check=True)
    return out.stdout.splitlines()


def test_train_numpy_keeps_the_global_batch_across_a_reconfiguration(tmp_path: Path) -> None:
    """Attempt 1 runs on 2 GPUs with 2 accumulation steps, attempt 2 resumes on 4 GPUs with 1: each
    prints its plan, the steps are contiguous, and the losses are those of a run that never changed
    (the same samples per step; only the order of float additions differs)."""
    ref = _train(tmp_path / "ref", False, TRAIN_STEPS=30)
    first = _train(tmp_path, False, TRAIN_STEPS=12, GPUSCHED_PLAN="ga", GPUSCHED_NUM_GPUS=2,
                   GPUSCHED_GRAD_ACCUM_STEPS=2)
    assert first[0] == "plan ga on 2 GPUs, 2 accumulation steps: micro-batch 16, global batch 64"
    second = _train(tmp_path, True, TRAIN_STEPS=30, GPUSCHED_PLAN="zero-dp", GPUSCHED_NUM_GPUS=4,
                    GPUSCHED_GRAD_ACCUM_STEPS=1)
    assert second[0] == f"resumed from checkpoint at step 12 in {tmp_path / 'ck'}"
    assert second[1] == "plan zero-dp on 4 GPUs, 1 accumulation step: micro-batch 16, global batch 64"
    assert step_numbers(first) + step_numbers(second) == list(range(1, 31))

    def losses(lines: list[str]) -> list[float]:
        return [float(ln.split("loss=")[1].split()[0]) for ln in lines if ln.startswith("step ")]

    assert losses(first) + losses(second) == pytest.approx(losses(ref), abs=2e-4)


def test_train_numpy_refuses_a_bad_gpu_count(tmp_path: Path) -> None:
    env = {**os.environ, "CHECKPOINT_DIR": str(tmp_path / "ck"), "GPUSCHED_NUM_GPUS": "0", "TRAIN_STEPS": "1"}
    out = subprocess.run([PY, str(TRAIN)], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "GPUSCHED_NUM_GPUS must be >= 1" in out.stderr


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
