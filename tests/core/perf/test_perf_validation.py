"""The fitted model against the measured traces, and the validate command."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from scheduler.core.perf.__main__ import main
from scheduler.core.perf.catalog import CATALOG
from scheduler.core.perf.data import load_profile
from scheduler.core.perf.validate import OFFLOAD_THREADS, PAPER_MAX, plan_group


def test_model_reproduces_measurements_within_the_error_it_reports(fitted, placements, validation) -> None:
    """Each measured time, predicted again through the scalar API, lies within
    the largest error the report states for its model and plan, and the
    report's averages are the averages of those errors."""
    reported = {(g.model, g.group): g.all for g in validation.groups}
    errors: dict[tuple[str, str], list[float]] = {}
    for model, rows in placements.items():
        for r in rows:
            cpus = sum(r.placement) * (OFFLOAD_THREADS if r.plan.memory == "zero-offload" else 1.0)
            predicted = fitted.iter_time(model, r.plan, r.placement, cpus=cpus)
            errors.setdefault((model, plan_group(r.plan)), []).append(abs(predicted - r.iter_s) / r.iter_s)
    assert set(errors) == set(reported)
    for key, errs in errors.items():
        stats = reported[key]
        assert stats.count == len(errs)
        assert 100 * max(errs) <= stats.max_pct * (1 + 1e-9), key
        assert 100 * np.mean(errs) == pytest.approx(stats.avg_pct, rel=1e-9), key


def test_profiled_configurations_are_reproduced_within_the_papers_largest_error(fitted, morphling) -> None:
    """In-sample check: every profiling run's own iteration time comes back
    within 10.4 %, the largest error the paper reports."""
    worst = 0.0
    for name, spec in CATALOG.items():
        model = spec.profile_model or name
        for run in load_profile(morphling / "profiles" / spec.profile):
            predicted_ms = 1000 * fitted.iter_time(model, run.plan, (run.gpus,), cpus=run.threads * run.gpus)
            worst = max(worst, abs(predicted_ms - run.iter_ms) / run.iter_ms)
    assert 100 * worst <= PAPER_MAX


def test_every_model_and_plan_is_reported_with_the_authors_coefficients(validation) -> None:
    models = {g.model for g in validation.groups}
    assert models == set(CATALOG)
    assert validation.overall().count == len(validation.rows) > 500
    for c in validation.coefficients:
        assert c.authors is not None, c.model
        assert set(c.ours) == set(c.authors)


def test_llama30_borrows_what_its_offload_only_profile_cannot_identify(fitted) -> None:
    assert set(fitted.fit("llama30").borrowed) == {"k_bwd", "k_opt"}
    assert fitted.fit("llama30").coeffs == fitted.fit("llama7").coeffs
    # Same profile runs, but LLaMA-30B's forward is scaled up from LLaMA-7B's.
    assert fitted.fit("llama30").forward.at(8) > 2 * fitted.fit("llama7").forward.at(8)


def test_validate_command_prints_and_writes_json(morphling: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "perf.json"
    assert main(["validate", "--traces", str(morphling), "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "paper (arXiv 2408.08586)" in text and "authors" in text
    report = json.loads(out.read_text())
    assert {g["model"] for g in report["groups"]} == set(CATALOG)
    assert len(report["rows"]) == report["overall"]["count"]
    assert report["command"].startswith("python -m scheduler.perf validate")


def test_validate_command_reports_bad_data_with_file_and_line(tmp_path: Path, morphling: Path, capsys) -> None:
    root = tmp_path / "morphling"
    (root / "profiles").mkdir(parents=True)
    (root / "placements").mkdir()
    for item in (morphling / "profiles").iterdir():
        target = root / "profiles" / item.name
        if item.is_dir():
            target.mkdir()
            for f in item.iterdir():
                target.joinpath(f.name).write_bytes(f.read_bytes())
        else:
            target.write_bytes(item.read_bytes())
    for f in (morphling / "placements").iterdir():
        (root / "placements" / f.name).write_bytes(f.read_bytes())
    bert = root / "placements" / "bert.csv"
    lines = bert.read_text().splitlines()
    lines[3] = lines[3].replace("ga,", "warp,", 1)
    bert.write_text("\n".join(lines) + "\n")
    assert main(["validate", "--traces", str(root)]) == 2
    assert f"{bert}:4: unknown plan 'warp'" in capsys.readouterr().err
