"""The simulator's configuration refuses nonsense, naming the field."""

from __future__ import annotations

import pytest

from scheduler.sim.records import SimConfig


@pytest.mark.parametrize("field", ["resume_overhead", "reconfigure_overhead"])
@pytest.mark.parametrize("value", [-1.0, float("nan")])
def test_negative_or_undefined_overheads_are_refused_by_name(field, value):
    with pytest.raises(ValueError, match=f"{field} must be >= 0"):
        SimConfig(**{field: value})


def test_defaults_are_a_minute_of_overhead_and_no_attempt_log():
    config = SimConfig()
    assert (config.resume_overhead, config.reconfigure_overhead, config.record_attempts) == (60.0, 60.0, False)
    assert config.shares is None
