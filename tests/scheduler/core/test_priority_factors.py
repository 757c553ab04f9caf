"""Priority factors of a pending job, with fair share off and on."""

from __future__ import annotations

import pytest

from scheduler.core.fairshare import TenantUsage
from scheduler.core.priority_factors import priority_factors


def test_fair_share_factor_when_on():
    tenants = {"a": TenantUsage(1.0, 300.0), "b": TenantUsage(1.0, 100.0)}
    # a used 3/4 of all usage with half the shares: 2^(-0.75/0.5).
    assert priority_factors("BE", 0, 0.0, 10.0, "a", tenants)["fair_share"] == pytest.approx(2 ** -1.5)
    assert priority_factors("BE", 0, 0.0, 10.0, "new", tenants)["fair_share"] == pytest.approx(1.0)


def test_off_and_age():
    f = priority_factors("TE", 5, 100.0, 160.0)
    assert f == {"class": "TE", "class_first": True, "fair_share": None, "priority": 5, "age_seconds": 60.0}
