"""The job-side helper: lines the agent accepts, a no-op outside the scheduler, bad arguments refused at once."""

from __future__ import annotations

import json
import math

import pytest

from cluster import progress_schema
from gpusched import job


def test_reports_are_json_lines_the_agent_accepts(tmp_path, monkeypatch) -> None:
    path = tmp_path / "progress.jsonl"
    monkeypatch.setenv("GPUSCHED_PROGRESS_FILE", str(path))
    assert job.progress(step=3, total_steps=10, epoch=0.3, metrics={"loss": 0.7, "val/acc": 1})
    assert job.checkpoint(step=3, path=tmp_path / "ck.pt")
    lines = path.read_bytes().splitlines()
    first, second = (progress_schema.parse_line(line) for line in lines)
    assert {k: first[k] for k in ("step", "total_steps", "epoch", "metrics")} == {
        "step": 3, "total_steps": 10, "epoch": 0.3, "metrics": {"loss": 0.7, "val/acc": 1.0}}
    assert second["checkpoint"] == {"step": 3, "path": str(tmp_path / "ck.pt")}


def test_outside_the_scheduler_nothing_is_written(monkeypatch) -> None:
    monkeypatch.delenv("GPUSCHED_PROGRESS_FILE", raising=False)
    assert job.progress(step=1) is False


def test_an_unwritable_file_never_fails_the_training_run(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("GPUSCHED_PROGRESS_FILE", str(tmp_path / "missing-dir" / "p.jsonl"))
    assert job.progress(step=1) is False


@pytest.mark.parametrize("kwargs, error", [
    ({"step": 1.5}, TypeError), ({"step": True}, TypeError), ({"step": -1}, ValueError),
    ({"total_steps": 0}, ValueError), ({"epoch": math.nan}, ValueError),
    ({"metrics": {"loss": math.inf}}, ValueError), ({"metrics": {"bad name": 1}}, ValueError),
    ({"metrics": {f"m{i}": 1 for i in range(17)}}, ValueError), ({"metrics": [1]}, TypeError),
    ({"metrics": {"loss": "low"}}, TypeError),
])
def test_bad_arguments_raise_in_the_script(tmp_path, monkeypatch, kwargs, error) -> None:
    monkeypatch.setenv("GPUSCHED_PROGRESS_FILE", str(tmp_path / "p.jsonl"))
    with pytest.raises(error):
        job.progress(**kwargs)
    assert not (tmp_path / "p.jsonl").exists()


def test_the_helper_imports_nothing_outside_the_standard_library() -> None:
    import ast
    import sys

    tree = ast.parse(open(job.__file__).read())
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    assert imported - {"__future__"} <= set(sys.stdlib_module_names), imported
    assert json.dumps  # the helper writes with the standard json module
