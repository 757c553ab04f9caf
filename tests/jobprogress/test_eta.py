"""Step rate and ETA from a progress history."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from jobprogress.eta import eta_seconds, step_rate


def test_rate_over_the_recent_window_and_the_eta_it_gives() -> None:
    points = [[0, 0, {}], [10, 100, {}], [20, 200, {}], [30, None, {"loss": 1}], [40, 400, {}]]
    assert step_rate(points) == 10.0
    assert eta_seconds(400, 1000, 10.0) == 60.0
    assert eta_seconds(1000, 1000, None) == 0.0 and eta_seconds(5, None, 1.0) is None and eta_seconds(5, 9, None) is None


def test_old_points_fall_out_of_the_window_and_a_resume_restarts_the_measurement() -> None:
    slow_then_fast = [[0, 0, {}], [1000, 10, {}], [1010, 110, {}], [1020, 210, {}]]
    assert step_rate(slow_then_fast) == 10.0
    resumed = [[0, 0, {}], [10, 500, {}], [20, 300, {}], [30, 350, {}]]  # back to a checkpoint at step 300
    assert step_rate(resumed) == 5.0
    assert step_rate([[0, 5, {}]]) is None and step_rate([[0, 5, {}], [0, 6, {}]]) is None


@given(st.lists(st.tuples(st.floats(0, 1e6), st.integers(0, 10**6)), max_size=30))
def test_the_rate_is_never_negative_and_the_eta_never_negative(raw) -> None:
    points = [[t, s, {}] for t, s in sorted(raw)]
    rate = step_rate(points)
    assert rate is None or rate > 0
    eta = eta_seconds(points[-1][1] if points else None, 10**6, rate)
    assert eta is None or eta >= 0
