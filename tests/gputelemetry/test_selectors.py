"""Reading telemetry back: node GPUs with their latest readings and series; a job's newest attempt's series."""

from __future__ import annotations

import pytest

from cluster.telemetry_schema import check_report
from gputelemetry import selectors, services

pytestmark = [pytest.mark.django_db, pytest.mark.redis]
T = 1_700_000_000.0


def ingest(t: float, util: float) -> None:
    services.ingest("n1", check_report(t, [{"i": 0, "uuid": "GPU-a", "util": util, "fb_used": 5, "fb_total": 10,
                                            "temp": 30, "power": 60, "xid": [43]}],
                                       [{"job_id": 9, "attempt": 2, "gpus": [0], "proc_mem": 4}]))


def test_a_node_shows_every_gpu_row_with_its_latest_reading_and_series(make_node) -> None:  # noqa: ANN001
    make_node("n1", 2)
    ingest(T, 20.0)
    ingest(T + 5, 80.0)
    found = selectors.node_telemetry("n1", T + 5, 900)
    first, second = found["gpus"]
    assert first["latest"]["uuid"] == "GPU-a" and first["latest"]["util"] == 80.0 and first["last_xid"] == 43
    assert first["series"]["t"] == [T, T + 5] and first["series"]["util"] == [20, 80]
    assert second["latest"] is None and second["series"]["t"] == []
    assert first["healthy"] is True and found["step"] == 5


def test_a_job_shows_its_newest_attempt_with_telemetry() -> None:
    ingest(T, 50.0)
    found = selectors.job_telemetry(9, [1, 2, 3], T, 900)
    assert found["attempt"] == 2 and found["series"]["proc_mem"] == [4]
    assert selectors.job_telemetry(9, [1], T, 900) is None


@pytest.mark.parametrize("raw, window", [("60", 900), ("901", 21600), ("x", 900), (None, 900), ("99999999", 86400)])
def test_windows_are_clamped_to_the_ring_tiers(raw, window) -> None:  # noqa: ANN001
    assert selectors.clamp_window(raw) == window
