"""Ingestion: one report writes every GPU's ring and latest reading and each attempt's job series."""

from __future__ import annotations

import pytest

from cluster.telemetry_schema import check_report
from gputelemetry import services, store

pytestmark = [pytest.mark.redis, pytest.mark.django_db]


def report(t: float):  # noqa: ANN201
    gpus = [{"i": i, "uuid": f"GPU-{i}", "util": u, "fb_used": 2000, "fb_total": 81559, "temp": 40.0 + i,
             "power": 100.0, "xid": [31] if i == 2 else []} for i, u in enumerate((90.0, 10.0, 0.0))]
    jobs = [{"job_id": 12, "attempt": 3, "gpus": [0, 1], "proc_mem": 3000}, {"job_id": "ext-1", "attempt": 1, "gpus": [2]}]
    return check_report(t, gpus, jobs)


def test_a_report_fills_the_gpu_rings_the_latest_readings_and_the_job_series(telemetry_redis) -> None:  # noqa: ANN001
    services.ingest("n1", report(1_700_000_000.0))
    assert set(telemetry_redis.hgetall(store.latest_key("n1"))) == {b"0", b"1", b"2"}
    assert telemetry_redis.hgetall(store.xid_key("n1")) == {b"2": b"31"}
    gpu0 = store.unpack(telemetry_redis.get(store.gpu_key("n1", 0)), 1_700_000_000, 0)
    assert [(p.util, p.proc_mem) for p in gpu0] == [(90, 1500)]
    job = store.unpack(telemetry_redis.get(store.job_key(12, 3)), 1_700_000_000, 0)
    assert [(p.util, p.temp, p.power, p.fb_used, p.proc_mem) for p in job] == [(50, 41, 200, 4000, 3000)]
    assert not list(telemetry_redis.scan_iter(match=f"{store.PREFIX}:job:ext-1*"))  # not this server's job id


def test_a_report_with_a_listed_xid_takes_the_gpu_out_of_service(make_node, no_triggers) -> None:  # noqa: ANN001
    from cluster import gpu_health
    from cluster.models import Gpu

    gpu_health._cached = None
    make_node("n1", 3)
    services.ingest("n1", check_report(1.7e9, [{"i": 1, "uuid": "GPU-1", "xid": [79]}, {"i": 2, "uuid": "GPU-2",
                                                                                       "xid": [31]}], []))
    assert list(Gpu.objects.filter(healthy=False).values_list("index", "unhealthy_reason")) == [(1, "Xid 79")]
