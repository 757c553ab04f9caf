"""Per-tenant results and attainment against hand-computed water-filling."""

from __future__ import annotations

import pytest

from scheduler.core.metrics import JobOutcome
from scheduler.core.model import JobClass, JobSpec
from scheduler.sim.fairness import attainment, tenant_summary

H = 3600.0


def job(jid, tenant, gpus, submit, first_start, completion, cls=JobClass.BE):
    spec = JobSpec(jid, cls, gpus, submit, tenant=tenant)
    out = JobOutcome(jid, cls, gpus, submit, completion - first_start, first_start, completion)
    return spec, out


def case(*jobs):
    specs = {s.id: s for s, _ in jobs}
    outcomes = [o for _, o in jobs]
    attempts = {o.job_id: [(o.num_gpus, (o.first_start, o.completion))] for o in outcomes}
    return specs, outcomes, attempts


def test_two_backlogged_tenants_equal_shares_one_got_everything():
    # 4 GPUs, one 1-hour window. a runs 4 GPUs all hour; b waits all hour for 4 GPUs.
    # Demands 4 and 4 GPU-hours; entitlement 2 each; a got 4 (capped 1), b got 0.
    specs, outcomes, attempts = case(job("a1", "a", 4, 0, 0, H), job("b1", "b", 4, 0, H, 2 * H))
    got = attainment(specs, outcomes, attempts, 4, {}, window=H)
    # Window 0: a not backlogged (never waited), b backlogged with 0 -> 0.
    # Window 1: b runs alone, no one waits.
    assert got["tenant_windows"] == 1
    assert got["attainment"] == {"p10": 0.0, "median": 0.0}


def test_shares_weigh_the_entitlement():
    # 4 GPUs, 1 h: a (share 3) and b (share 1) both wait part of the hour.
    # a holds 2 GPUs all hour, b holds 2; both have 4 more GPUs pending all hour.
    # Demands 6 and 6 GPU-h; entitlement 3 and 1: a got 2/3, b got min(1, 2/1) = 1.
    specs, outcomes, attempts = case(
        job("a1", "a", 2, 0, 0, H), job("a2", "a", 4, 0, H, 2 * H),
        job("b1", "b", 2, 0, 0, H), job("b2", "b", 4, 0, 2 * H, 3 * H),
    )
    got = attainment(specs, outcomes, attempts, 4, {"a": 3.0, "b": 1.0}, window=H)
    first = attainment(specs, outcomes, attempts, 4, {"a": 3.0, "b": 1.0}, window=H)
    assert first == got
    # Window 0 pairs: a 2/3, b 1. Window 1: b waits (b2 pending), a runs a2: demand a 4, b 4,
    # entitlement a 3, b 1; b got 0 -> 0. Values [0, 2/3, 1].
    assert got["tenant_windows"] == 3
    assert got["attainment"]["median"] == pytest.approx(2 / 3)
    assert got["attainment"]["p10"] == pytest.approx(0.2 * 2 / 3)


def test_a_tenant_whose_small_demand_is_met_leaves_the_rest_to_others():
    # 4 GPUs, 1 h. a wants 1 GPU and gets it; b wants 8 and gets 3: entitlement 3 -> 1.
    specs, outcomes, attempts = case(
        job("a1", "a", 1, 0, 0, H), job("b1", "b", 3, 0, 0, H), job("b2", "b", 5, 0, H, 2 * H),
    )
    got = attainment(specs, outcomes, attempts, 8, {}, window=H)
    # Window 0: b waits; demand a 1, b 8 GPU-h; cluster 8 -> a 1, b 7; b got 3 -> 3/7.
    assert got["attainment"]["median"] == pytest.approx(3 / 7)


def test_empty_and_bad_window():
    assert attainment({}, [], {}, 8, {})["tenant_windows"] == 0
    with pytest.raises(ValueError, match="window"):
        attainment({}, [], {}, 8, {}, window=0)


def test_tenant_summary():
    specs, outcomes, _ = case(job("a1", "a", 2, 0, 0, H), job("a2", "a", 1, 0, 10, 20, cls=JobClass.TE))
    got = tenant_summary(specs, outcomes, {"a1": 2 * H, "a2": 10.0}, {"a": 2.0})
    assert got["a"]["configured_share"] == 2.0 and got["a"]["jobs"] == 2
    assert got["a"]["gpu_seconds"] == 2 * H + 10.0
    assert got["a"]["te_p95_slowdown"] == pytest.approx(2.0)
    assert got["a"]["be_median_slowdown"] == pytest.approx(1.0)
