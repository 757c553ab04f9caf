"""``--eta-sample``: the seeded draw, the within-25 % rule with its 5-minute
floor, the waited-only figure, and the CSV of forecasts."""

from __future__ import annotations

import csv

import pytest

from scheduler.core.model import JobClass, JobSpec
from scheduler.core.policy import make_policy
from scheduler.sim.cluster import make_nodes
from scheduler.sim.eta import CSV_COLUMNS, EtaSample, choose_samples, eta_summary, sample_run, waited_count, write_eta_csv
from scheduler.sim.records import SimConfig
from scheduler.sim.workloads.types import SimJob

BE = JobClass.BE


def sample(jid, submit, forecast, actual):
    return EtaSample(jid, BE, submit, forecast, actual)


def test_within_is_25_percent_of_the_wait_or_five_minutes():
    samples = [
        sample("now", 0.0, 0.0, 0.0),              # no wait, exact
        sample("floor", 0.0, 290.0, 0.0),          # 290 s off: under the 5-minute floor
        sample("late", 0.0, 400.0, 0.0),           # 400 s off a job that did not wait
        sample("w-ok", 0.0, 3000.0, 3600.0),       # 600 s off a 3600 s wait: 900 s allowed
        sample("w-bad", 0.0, 7000.0, 3600.0),      # 3400 s off
        sample("never", 0.0, None, 4000.0),        # past the horizon: never within
    ]
    out = eta_summary(samples, horizon=10_000.0)
    assert out["samples"] == 6
    assert out["within_25pct"] == pytest.approx(3 / 6)
    assert out["within_25pct_waited"] == pytest.approx(1 / 3)
    errors = sorted([0.0, 290.0, 400.0, 600.0, 3400.0, 6000.0])
    assert out["abs_error_seconds"]["p50"] == pytest.approx((400.0 + 600.0) / 2)
    assert out["abs_error_seconds"]["p90"] == pytest.approx(errors[4] + (errors[5] - errors[4]) * 0.5)
    assert waited_count(samples) == 3
    assert set(out) == {"samples", "abs_error_seconds", "within_25pct", "within_25pct_waited"}


def test_no_waiting_sample_gives_none():
    out = eta_summary([sample("a", 0.0, 0.0, 10.0)])
    assert out["within_25pct"] == 1.0 and out["within_25pct_waited"] is None


def test_the_draw_is_seeded():
    jobs = [SimJob(JobSpec(f"j{i}", BE, 1, float(i)), 10.0) for i in range(50)]
    a, b = choose_samples(jobs, 7, 3), choose_samples(jobs, 7, 3)
    assert a == b and len(a) == 7 and a != choose_samples(jobs, 7, 4)
    assert choose_samples(jobs, 500, 0) == {j.spec.id for j in jobs}
    with pytest.raises(ValueError, match="eta-sample"):
        choose_samples(jobs, 0, 0)


def test_a_run_with_samples_decides_like_a_plain_run_and_writes_its_csv(tmp_path):
    jobs = [SimJob(JobSpec(f"j{i}", BE, 2, float(60 * i), user="u"), 1000.0 + 37 * i) for i in range(30)]
    from scheduler.sim.engine import simulate

    plain = simulate(make_policy("fitgpp"), make_nodes(1, 4), jobs, SimConfig())
    result, samples = sample_run(make_policy("fitgpp"), make_nodes(1, 4), jobs, SimConfig(), k=10, seed=1)
    assert result.outcomes == plain.outcomes
    assert len(samples) == 10
    assert all(s.forecast_start is None or s.forecast_start >= s.submit_time for s in samples)

    class Run:
        policy, eta_samples = "fitgpp", samples

    path = tmp_path / "eta.csv"
    write_eta_csv(str(path), [Run])
    rows = list(csv.DictReader(path.open()))
    assert tuple(rows[0]) == CSV_COLUMNS and len(rows) == 10
    assert {r["job_id"] for r in rows} == {s.job_id for s in samples}
