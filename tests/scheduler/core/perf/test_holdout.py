"""The held-out protocol: which placement rows the fit sees, and the report
that keeps every other row apart (``scheduler/core/perf/holdout.py``)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from scheduler.core.perf.__main__ import main, morphling_dir
from scheduler.core.perf.catalog import CATALOG
from scheduler.core.perf.data import PlacementRow, load_placements
from scheduler.core.perf.fit import THREE_D
from scheduler.core.perf.holdout import SAMPLED_PER_MODEL, plan_group, row_key, sample_all, sample_rows
from scheduler.core.perf.plans import parse_placement, parse_plan
from scheduler.core.perf.throughput import ThroughputModel


def _row(plan: str, placement: str, seconds: float = 1.0) -> PlacementRow:
    return PlacementRow(parse_plan(plan), parse_placement(placement), seconds, "test:1")


ROWS = [_row("ga", "8"), _row("zero-dp", "44"), _row("241", "44"), _row("441", "4444"), _row("421", "2222"),
        _row("222", "44"), _row("212", "22"), _row("881", "88888888")]


def _traces() -> Path:
    root = morphling_dir(None)
    if not (root / "profiles").is_dir():
        if os.environ.get("CI", "").strip().lower() == "true":
            pytest.fail(f"Rubick traces not found at {root}; CI=true requires them", pytrace=False)
        pytest.skip(f"Rubick traces not found at {root} (set GPUSCHED_TRACES_DIR)")
    return root


def test_only_3d_rows_are_sampled_and_at_most_the_stated_number() -> None:
    picked = sample_rows("t5", ROWS, per_model=4)
    assert len(picked) == 4
    assert all(r.plan.is_3d for r in picked)
    # Both 3D families take turns: two rows from each.
    assert sorted(plan_group(r.plan) for r in picked) == ["3D dp+tp+pp"] * 2 + ["3D tp+pp"] * 2


def test_sample_is_reproducible_and_depends_on_seed_and_model_only() -> None:
    assert sample_rows("t5", ROWS) == sample_rows("t5", list(reversed(ROWS)))
    draws = {tuple(row_key("t5", r) for r in sample_rows("t5", ROWS, per_model=2, seed=s)) for s in range(20)}
    assert len(draws) > 1


def test_fewer_eligible_rows_than_asked_are_all_taken_and_zero_takes_none() -> None:
    assert len(sample_rows("t5", ROWS, per_model=100)) == 6
    assert sample_rows("t5", ROWS, per_model=0) == []
    assert sample_rows("vit", [_row("ga", "8"), _row("gc", "44")]) == []
    with pytest.raises(ValueError, match="per_model"):
        sample_rows("t5", ROWS, per_model=-1)


def test_3d_coefficients_change_3d_predictions_only() -> None:
    """Fitted with the sampled 3D rows, a model predicts every data-parallel
    configuration exactly as when fitted from the profiles alone."""
    root = _traces()
    alone = ThroughputModel.from_traces(root, models=["t5"], sampled_per_model=0)
    sampled = ThroughputModel.from_traces(root, models=["t5"])
    for plan, where in (("ga", "8"), ("zero-dp", "233"), ("zero-offload", "44"), ("gc", "1111")):
        assert sampled.iter_time("t5", plan, where) == alone.iter_time("t5", plan, where)
    assert alone.fit("t5").coeffs.k_3d == 1.0 and alone.fit("t5").coeffs.k_stage == 0.0
    # t5's 3D runs do more work than its data-parallel runs, and each
    # pipeline stage costs time: both fitted above their neutral values.
    assert sampled.fit("t5").coeffs.k_3d > 1.5 and sampled.fit("t5").coeffs.k_stage > 0.0


def test_validate_reports_held_out_rows_apart_from_the_sampled_ones(tmp_path: Path) -> None:
    root = _traces()
    out = tmp_path / "perf.json"
    assert main(["validate", "--traces", str(root), "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    placements = {name: load_placements(root / "placements" / f"{spec.placements}.csv")
                  for name, spec in CATALOG.items()}
    seen = {row_key(m, r) for m, rows in sample_all(placements).items() for r in rows}
    assert 0 < len(report["sampled_rows"]) == len(seen) <= SAMPLED_PER_MODEL * len(CATALOG)
    for group in report["groups"]:
        assert set(group["all"]) == set(group["held_out"]) == {"count", "avg_pct", "max_pct"}
        held = [r for r in report["rows"] if r["model"] == group["model"] and r["group"] == group["plan"]
                and r["held_out"]]
        assert group["held_out"]["count"] == len(held)
        if held:
            assert group["held_out"]["max_pct"] == pytest.approx(max(r["error_pct"] for r in held))
            assert group["held_out"]["avg_pct"] == pytest.approx(sum(r["error_pct"] for r in held) / len(held))
    sampled_keys = {(r["model"], r["plan"], r["placement"]) for r in report["sampled_rows"]}
    for r in report["rows"]:
        assert r["held_out"] == ((r["model"], r["plan"], r["placement"]) not in sampled_keys)
    assert report["overall_held_out"]["count"] == report["overall"]["count"] - len(seen)
    assert set(report["coefficients"][0]["ours"]) >= set(THREE_D)


def test_profiles_only_holds_every_row_out(tmp_path: Path) -> None:
    root = _traces()
    out = tmp_path / "perf.json"
    assert main(["validate", "--traces", str(root), "--sampled", "0", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["sampled_rows"] == []
    assert report["overall_held_out"] == report["overall"]
    assert report["command"].endswith("--sampled 0")
