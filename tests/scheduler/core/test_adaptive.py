"""Shapes and the power mean the adaptive policies use."""

from __future__ import annotations

import numpy as np
import pytest

from scheduler.core.adaptive import power_mean, spread_shape


def test_spread_shape_is_as_even_as_possible_and_refuses_what_cannot_fit() -> None:
    assert spread_shape(1, 3) == (3,)
    assert spread_shape(2, 5) == (3, 2)
    assert spread_shape(3, 12) == (4, 4, 4)
    assert spread_shape(2, 1) is None       # a node without a GPU
    assert spread_shape(1, 5) is None       # more than a node holds
    assert spread_shape(0, 0) is None


def test_power_mean_minus_one_is_the_harmonic_mean() -> None:
    v = np.array([[1.0, 2.0, 4.0]])
    assert power_mean(v, -1.0)[0] == pytest.approx(3 / (1 + 0.5 + 0.25))
    assert power_mean(v, 1.0)[0] == pytest.approx(7 / 3)
    assert power_mean(v, 0.0)[0] == pytest.approx(2.0)
