"""``python -m scheduler.sim --trace-format pollux``: a Pollux study workload
as TunedJobs on the study's cluster; bad rows refused with file and line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scheduler.sim.cli import main
from tests.scheduler.sim.workloads.pollux_traces import pollux_root


@pytest.fixture
def study(tmp_path: Path) -> Path:
    """A copy of the study's layout holding the first 20 jobs of workload-1."""
    root = tmp_path / "pollux"
    (root / "workloads").mkdir(parents=True)
    (root / "apps").symlink_to(pollux_root() / "apps")
    lines = (pollux_root() / "workloads" / "workload-1.csv").read_text().splitlines()
    (root / "workloads" / "w20.csv").write_text("\n".join(lines[:21]) + "\n")
    return root / "workloads" / "w20.csv"


def test_runs_on_the_study_cluster(study: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "r.json"
    status = main(["--trace", str(study), "--trace-format", "pollux", "--policy", "tiresias:within_queue=arrival",
                   "--resume-overhead", "30", "--no-progress", "--json", str(out)])
    assert status == 0
    run = json.loads(out.read_text())[0]
    assert run["jobs"] == 20 and "TunedJobs" in run["workload"]
    assert "16x4 (64 GPUs)" in capsys.readouterr().out


def test_bad_row_is_refused_with_file_and_line(study: Path, capsys) -> None:
    lines = study.read_text().splitlines()
    lines[4] = lines[4].replace("cifar10", "mnist", 1) if "cifar10" in lines[4] else "bad-4,1,mnist,1,128"
    study.write_text("\n".join(lines) + "\n")
    status = main(["--trace", str(study), "--trace-format", "pollux", "--policy", "fifo", "--no-progress"])
    assert status == 2
    assert f"{study}:5: column 'application'" in capsys.readouterr().err


def test_optimus_runs_adaptive_jobs_in_rounds(study: Path, tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    status = main(["--trace", str(study), "--trace-format", "pollux", "--pollux-jobs", "trace-batch",
                   "--round-seconds", "60", "--policy", "optimus", "--no-progress", "--json", str(out)])
    assert status == 0
    run = json.loads(out.read_text())[0]
    assert run["jobs"] == 20 and "adaptive jobs" in run["workload"]


def test_pollux_jobs_outside_a_pollux_trace_is_refused(study: Path, capsys) -> None:
    status = main(["--trace", str(study), "--pollux-jobs", "adaptive", "--policy", "fifo", "--no-progress"])
    assert status != 0
    assert "--pollux-jobs applies only to --trace-format pollux" in capsys.readouterr().err
