"""Fair-share arithmetic: decay, the Slurm factor, water-filling, the ledger."""

from __future__ import annotations

import math

import pytest

from scheduler.core.fairshare import TenantUsage, UsageLedger, accrue, decay, factors, water_fill


def test_usage_halves_every_half_life():
    assert decay(800.0, 3600.0, 3600.0) == pytest.approx(400.0)
    assert decay(800.0, 7200.0, 3600.0) == pytest.approx(200.0)
    assert decay(800.0, 0.0, 3600.0) == 800.0


def test_accrue_is_the_exact_integral_whatever_the_update_steps():
    h = 3600.0
    once = accrue(100.0, 4.0, 7200.0, h)
    stepped = 100.0
    for _ in range(72):
        stepped = accrue(stepped, 4.0, 100.0, h)
    assert stepped == pytest.approx(once)
    # Steady state: holding g GPUs forever converges to g * h / ln 2.
    assert accrue(0.0, 4.0, 1e9, h) == pytest.approx(4.0 * h / math.log(2.0))


def test_slurm_factor_is_one_half_at_share_and_one_unused():
    f = factors({"a": TenantUsage(1.0, 100.0), "b": TenantUsage(1.0, 100.0), "c": TenantUsage(2.0, 0.0)})
    # a used half of all usage with a quarter of the shares: 2^(-0.5/0.25) = 0.25.
    assert f["a"] == pytest.approx(0.25)
    assert f["c"] == pytest.approx(1.0)
    even = factors({"a": TenantUsage(1.0, 50.0), "b": TenantUsage(3.0, 150.0)})
    assert even["a"] == pytest.approx(0.5) and even["b"] == pytest.approx(0.5)


def test_water_fill_by_hand():
    # 12 GPUs, equal shares: a wants 2 (gets it), b and c split the other 10.
    assert water_fill(12, {"a": 2, "b": 10, "c": 20}, {"a": 1, "b": 1, "c": 1}) == pytest.approx(
        {"a": 2, "b": 5, "c": 5})
    # Shares 1:3, both backlogged: 25 % / 75 %.
    assert water_fill(100, {"a": 100, "b": 100}, {"a": 1, "b": 3}) == pytest.approx({"a": 25, "b": 75})
    # Shares 1:3, b wants only 30: a gets the rest.
    assert water_fill(100, {"a": 100, "b": 30}, {"a": 1, "b": 3}) == pytest.approx({"a": 70, "b": 30})
    # Demand below capacity: everybody gets its demand; no demand, nothing.
    assert water_fill(100, {"a": 10, "b": 20, "c": 0}, {"a": 1, "b": 1, "c": 1}) == pytest.approx(
        {"a": 10, "b": 20, "c": 0})
    # Three levels: 10 over a (1), b (1), c (2) with demands 1, 4, 100 -> 1, 3, 6.
    assert water_fill(10, {"a": 1, "b": 4, "c": 100}, {"a": 1, "b": 1, "c": 2}) == pytest.approx(
        {"a": 1, "b": 3, "c": 6})


def test_share_must_be_positive_and_finite():
    for bad in (0, -1, math.inf, math.nan):
        with pytest.raises(ValueError, match="share"):
            TenantUsage(share=bad)
    with pytest.raises(ValueError, match="half_life"):
        UsageLedger({"a": 1.0}, half_life=0)


def test_ledger_accrues_per_tenant_and_user():
    ledger = UsageLedger({"a": 1.0, "b": 2.0}, half_life=3600.0)
    ledger.add("a", "alice", 4, 0.0)
    ledger.add("a", "alice", -4, 3600.0)
    state = ledger.state(7200.0)
    expected = accrue(0.0, 4.0, 3600.0, 3600.0) / 2
    assert state["a"].usage == pytest.approx(expected)
    assert state["a"].users["alice"] == pytest.approx(expected)
    assert state["b"].usage == 0.0 and state["b"].share == 2.0
    # A tenant with no configured share gets the default.
    ledger.add("z", "", 1, 7200.0)
    assert ledger.state(9000.0)["z"].share == 1.0
