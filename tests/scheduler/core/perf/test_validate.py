"""The fitted model against the measured traces, and the validate command."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from scheduler.core.perf.__main__ import main
from scheduler.core.perf.catalog import CATALOG
from scheduler.core.perf.data import load_profile
from scheduler.core.perf.fit import NVLINK, THREE_D
from scheduler.core.perf.validate import DATA_ANOMALIES, OFFLOAD_THREADS, PAPER_MAX, plan_group


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
        # Ours: the authors' seven and the two 3D coefficients they do not have.
        assert set(c.ours) == set(c.authors) | set(THREE_D)


def test_llama30_borrows_what_its_offload_only_profile_cannot_identify(fitted) -> None:
    assert set(fitted.fit("llama30").borrowed) == {"k_bwd", "k_opt", NVLINK}
    # Same profile runs, so the same data-parallel coefficients; the 3D ones
    # come from each model's own sampled 3D rows.
    same = {k: v for k, v in fitted.fit("llama30").coeffs.as_dict().items() if k not in THREE_D}
    assert same == {k: v for k, v in fitted.fit("llama7").coeffs.as_dict().items() if k not in THREE_D}
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


def test_paper_view_keeps_single_node_rows_and_names_every_row_it_leaves_out(validation) -> None:
    """The like-for-like view is the single-node rows minus the listed
    anomalies, and its statistics are those rows' errors."""
    view = validation.paper
    single = [r for r in validation.rows if not r.multi_node]
    left_out = {(r.model, r.plan, r.placement) for r, _ in view.excluded}
    assert left_out == set(DATA_ANOMALIES)
    assert all(reason for _, reason in view.excluded)
    assert [(m, g) for m, g, _ in view.groups] == [(g.model, g.group) for g in validation.groups]
    for model, group, stats in view.groups:
        errs = [r.error for r in single if (r.model, r.group) == (model, group)
                and (r.model, r.plan, r.placement) not in left_out]
        assert stats.count == len(errs)
        if errs:
            assert stats.avg_pct == pytest.approx(100 * np.mean(errs), rel=1e-9)
            assert stats.max_pct == pytest.approx(100 * max(errs), rel=1e-9)
    assert sum(s.count for _, _, s in view.groups) == len(single) - len(left_out)


def test_listed_anomalies_are_rows_whose_one_gpu_time_does_not_grow(placements) -> None:
    """Each row left out of the like-for-like view exists and ran no slower
    than the same plan on two GPUs plus 20 % (a full batch on one GPU takes
    1.66-1.92x as long in every other model and plan)."""
    times = {(m, r.plan.name, "".join(map(str, r.placement))): r.iter_s
             for m, rows in placements.items() for r in rows}
    for model, plan, placement in DATA_ANOMALIES:
        assert placement == "1"
        assert times[(model, plan, "1")] <= 1.2 * times[(model, plan, "2")]
    others = [k for k in times if k[2] == "1" and k not in DATA_ANOMALIES and (k[0], k[1], "2") in times]
    assert others and all(times[k] >= 1.5 * times[(k[0], k[1], "2")] for k in others)


def test_validate_command_prints_the_like_for_like_view_and_the_fixed_bandwidth_form(
        morphling: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "perf.json"
    assert main(["validate", "--traces", str(morphling), "--json", str(out)]) == 0
    fitted_text = capsys.readouterr().out
    assert "like-for-like view" in fitted_text and "why: " in fitted_text
    fitted = json.loads(out.read_text())
    assert {e["model"] for e in fitted["paper_view"]["excluded"]} == {"roberta"}
    assert main(["validate", "--traces", str(morphling), "--json", str(out), "--fixed-nvlink"]) == 0
    capsys.readouterr()
    fixed = json.loads(out.read_text())
    assert fixed["command"].endswith("--fixed-nvlink")
    assert {c["nvlink_gbps"] for c in fixed["coefficients"]} == {150.0}
    assert len({round(c["nvlink_gbps"], 3) for c in fitted["coefficients"]}) > 1


def test_a_bandwidth_given_to_predict_rows_prices_only_multi_node_rows(fitted, placements) -> None:
    from scheduler.core.perf.validate import predict_rows

    rows = [r for r in placements["bert"] if not r.plan.is_3d]
    own = predict_rows(fitted, "bert", rows)
    at_own = predict_rows(fitted, "bert", rows, bandwidth=fitted.fit("bert").env.net_gbps)
    slow = predict_rows(fitted, "bert", rows, bandwidth=1.0)
    assert [r.predicted_s for r in at_own] == [r.predicted_s for r in own]
    for base, r in zip(own, slow):
        if r.multi_node:
            assert r.predicted_s > base.predicted_s, r
        else:
            assert r.predicted_s == base.predicted_s, r
    assert any(r.multi_node for r in slow)
