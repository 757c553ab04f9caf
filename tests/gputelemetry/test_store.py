"""The rings: fixed size whatever the number of samples, tiers downsample, old laps are dropped on read."""

from __future__ import annotations

import pytest

from cluster.telemetry_schema import check_report
from gputelemetry import store

pytestmark = pytest.mark.redis


def gpu(i: int, util: float) -> dict:
    return {"i": i, "uuid": f"GPU-{i}", "util": util, "fb_used": 1000, "fb_total": 81559, "temp": 50.0,
            "power": 300.0}


def test_a_ring_never_grows_past_its_size_and_keeps_one_lap_per_tier(telemetry_redis) -> None:  # noqa: ANN001
    t0 = 1_700_000_000
    for k in range(400):  # 2000 s of 5 s samples: more than a lap of tier 0
        store.write_report(telemetry_redis, "n1", t0 + 5 * k, check_report(t0 + 5 * k, [gpu(0, k % 100)], []).gpus,
                           {}, [])
    blob = telemetry_redis.get(store.gpu_key("n1", 0))
    assert len(blob) == store.RING_BYTES  # made at its full size, never grown
    now = t0 + 5 * 399
    fine = store.unpack(blob, now, 0)
    assert len(fine) == 180 and fine[-1].t == now and fine[0].t == now - 5 * 179
    minute = store.unpack(blob, now, 1)
    assert [p.t % 60 for p in minute] == [55] * (len(minute) - 1) + [now % 60]  # the newest sample of each minute
    assert len(minute) == 2000 // 60 + 1
    assert telemetry_redis.ttl(store.latest_key("n1")) > 0


def test_values_are_clamped_to_their_fields() -> None:
    point = store.Point(*store.RECORD.unpack(store.pack(5, 250, -3, 1e9, -1, 1 << 40)))
    assert (point.util, point.temp, point.power, point.fb_used, point.proc_mem) == (100, 0, 0xFFFF, 0, 0xFFFFFFFF)


def test_the_finest_tier_covering_a_window_is_chosen() -> None:
    assert [store.tier_for(s) for s in (60, 900, 901, 6 * 3600, 10 ** 9)] == [0, 0, 1, 1, 2]
