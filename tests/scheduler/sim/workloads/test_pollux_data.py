"""Malformed Pollux files are refused with the file, the line and the column."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from scheduler.sim.workloads.canonical import TraceError
from scheduler.sim.workloads.pollux_data import load_app, load_apps, load_workload
from tests.scheduler.sim.workloads.pollux_traces import pollux_root

HEADER = "name,time,application,num_replicas,batch_size\n"


def test_the_study_loads(tmp_path: Path) -> None:
    root = pollux_root()
    apps = load_apps(root / "apps")
    assert set(apps) == {"bert", "cifar10", "deepspeech2", "imagenet", "ncf", "yolov3"}
    for i in range(1, 9):
        jobs = load_workload(root / "workloads" / f"workload-{i}.csv", set(apps))
        assert len(jobs) == 160


@pytest.mark.parametrize("row, line, column", [
    ("a-0,10,cifar10,2,256\na-1,x,cifar10,2,256\n", 3, "time"),
    ("a-0,-1,cifar10,2,256\n", 2, "time"),
    ("a-0,10,cifar10,0,256\n", 2, "num_replicas"),
    ("a-0,10,cifar10,2,25.5\n", 2, "batch_size"),
    ("a-0,10,cifar10,2,256\na-0,11,cifar10,2,256\n", 3, "name"),
    ("a-0,10,mnist,2,256\n", 2, "application"),
    (",10,cifar10,2,256\n", 2, "name"),
])
def test_bad_workload_rows(tmp_path: Path, row: str, line: int, column: str) -> None:
    path = tmp_path / "w.csv"
    path.write_text(HEADER + row)
    with pytest.raises(TraceError) as err:
        load_workload(path, {"cifar10"})
    assert (err.value.source, err.value.line, err.value.column) == (str(path), line, column)
    assert str(err.value).startswith(f"{path}:{line}: column {column!r}")


def test_missing_column_and_empty_and_binary_files(tmp_path: Path) -> None:
    path = tmp_path / "w.csv"
    path.write_text("name,time,application,num_replicas\nx,1,cifar10,1\n")
    with pytest.raises(TraceError, match=r"w.csv:1: column 'batch_size'"):
        load_workload(path)
    path.write_text(HEADER)
    with pytest.raises(TraceError, match="no jobs"):
        load_workload(path)
    path.write_bytes(b"\xff\xfe\x00bad")
    with pytest.raises(TraceError, match="not UTF-8"):
        load_workload(path)
    with pytest.raises(TraceError, match="file not found"):
        load_workload(tmp_path / "absent.csv")


@pytest.fixture
def app_copy(tmp_path: Path) -> Path:
    target = tmp_path / "cifar10"
    shutil.copytree(pollux_root() / "apps" / "cifar10", target)
    return target


@pytest.mark.parametrize("file, bad_line, column", [
    ("placements.csv", "10,32,0.04,0.0005", "placement"),
    ("placements.csv", "1,32,0.04,0.05", "sync_time"),
    ("placements.csv", "1,-3,0.04,0.0005", "local_bsz"),
    ("scalability.csv", "6,4,32,0.14,0.09", "num_replicas"),
    ("validation-256.csv", "1.0,300,0.42,17.3,nan", "grad_var"),
])
def test_bad_application_rows(app_copy: Path, file: str, bad_line: str, column: str) -> None:
    path = app_copy / file
    lines = path.read_text().splitlines()
    lines[5] = bad_line
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(TraceError) as err:
        load_app(app_copy)
    assert (err.value.source, err.value.line, err.value.column) == (str(path), 6, column)


def test_validation_progress_must_not_decrease(app_copy: Path) -> None:
    path = app_copy / "validation-256.csv"
    lines = path.read_text().splitlines()
    lines[3], lines[4] = lines[4], lines[3]
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(TraceError, match=r"validation-256.csv:5: column 'progress': decreases"):
        load_app(app_copy)
