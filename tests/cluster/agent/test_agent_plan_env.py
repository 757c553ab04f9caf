"""A reconfigurable job's allocation in the launch command, the job's environment and the
example training job (GPUSCHED_PLAN, GPUSCHED_NUM_GPUS, GPUSCHED_GRAD_ACCUM_STEPS)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from tests.cluster.agent.agent_testlib import PY, TRAIN, step_numbers

from cluster import protocol
from cluster.agent import jobenv


def test_launch_command_carries_the_plan_and_round_trips() -> None:
    cmd = protocol.LaunchCommand(job_id=7, attempt=2, command="x", gpu_indices=(0,), plan="zero-dp", num_gpus=3,
                                 grad_accum_steps=2, requested_gpus=4)
    back = protocol.LaunchCommand.from_kwargs(cmd.to_kwargs())
    assert back == cmd
    # A server that does not send the fields yet: defaults, no plan.
    old = {k: v for k, v in cmd.to_kwargs().items() if k not in ("plan", "num_gpus", "grad_accum_steps", "requested_gpus")}
    assert protocol.LaunchCommand.from_kwargs(old).plan == ""


@pytest.mark.parametrize("field, value", [
    ("plan", "ga; rm -rf /"), ("plan", 3), ("num_gpus", -1), ("num_gpus", True), ("grad_accum_steps", 0),
    ("requested_gpus", 1.5),
])
def test_launch_command_refuses_a_bad_plan_field_by_name(field: str, value: object) -> None:
    kwargs = {"job_id": 1, "attempt": 1, "command": "x", field: value}
    with pytest.raises(protocol.ProtocolError) as exc:
        protocol.LaunchCommand.from_kwargs(kwargs)
    assert exc.value.field == field


def test_job_environment_exports_the_plan_only_when_the_launch_names_one() -> None:
    cmd = protocol.LaunchCommand(job_id=7, attempt=2, command="x", gpu_indices=(1, 3), plan="244", num_gpus=32,
                                 grad_accum_steps=4, requested_gpus=8, env={"GPUSCHED_PLAN": "spoofed"})
    env = jobenv.job_environment({}, cmd, node="n1", checkpoint_dir=Path("/ck/7"))
    assert (env["GPUSCHED_PLAN"], env["GPUSCHED_NUM_GPUS"], env["GPUSCHED_GRAD_ACCUM_STEPS"],
            env["GPUSCHED_REQUESTED_GPUS"]) == ("244", "32", "4", "8")
    assert env["CUDA_VISIBLE_DEVICES"] == "1,3"
    # Without a plan nothing is exported, not even what the agent's own environment holds.
    plain = protocol.LaunchCommand(job_id=8, attempt=1, command="x", gpu_indices=(0,))
    env = jobenv.job_environment({"GPUSCHED_PLAN": "ga", "GPUSCHED_NUM_GPUS": "9"}, plain, node="n1",
                                 checkpoint_dir=Path("/ck/8"))
    assert "GPUSCHED_PLAN" not in env and "GPUSCHED_NUM_GPUS" not in env


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
