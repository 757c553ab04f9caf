"""The telemetry report's check: good reports pass whole, every hostile field is refused by name."""

from __future__ import annotations

import math

import pytest

from cluster.protocol import ProtocolError
from cluster.telemetry_schema import MAX_GPUS, check_report


def gpu(**fields):  # noqa: ANN003, ANN201
    return {"i": 0, "uuid": "GPU-1", "util": 50.0, "fb_used": 100, "fb_total": 81559, "temp": 40.0, "power": 300.0,
            "ecc_sbe": 0, "ecc_dbe": 1, "ecc_dbe_new": 1, "xid": [79], **fields}


def test_a_good_report_is_kept_whole() -> None:
    report = check_report(1.7e9, [gpu(), gpu(i=1, xid=[])], [{"job_id": 5, "attempt": 2, "gpus": [0, 1], "proc_mem": 7}])
    assert [g.index for g in report.gpus] == [0, 1]
    assert report.gpus[0].xids == (79,) and report.gpus[0].ecc_dbe_new == 1
    assert report.jobs[0].job_id == 5 and report.jobs[0].gpus == (0, 1) and report.jobs[0].proc_mem == 7


@pytest.mark.parametrize("gpus, jobs, field", [
    ([gpu(util=101)], [], "gpus[0].util"),
    ([gpu(util=math.nan)], [], "gpus[0].util"),
    ([gpu(temp=-1)], [], "gpus[0].temp"),
    ([gpu(fb_used="1")], [], "gpus[0].fb_used"),
    ([gpu(i=MAX_GPUS)], [], "gpus[0].i"),
    ([gpu(uuid="x" * 500)], [], "gpus[0].uuid"),
    ([gpu(uuid="a\nb")], [], "gpus[0].uuid"),
    ([gpu(xid=list(range(100)))], [], "gpus[0].xid"),
    ([gpu(xid=[True])], [], "gpus[0].xid"),
    ([gpu(), gpu()], [], "gpus"),
    ([gpu()] * (MAX_GPUS + 1), [], "gpus"),
    ("nope", [], "gpus"),
    ([gpu()], [{"job_id": "../x", "attempt": 1}], "jobs[0].job_id"),
    ([gpu()], [{"job_id": 1, "attempt": -1}], "jobs[0].attempt"),
    ([gpu()], [{"job_id": 1, "attempt": 1, "gpus": ["0"]}], "jobs[0].gpus"),
    ([gpu()], [{"job_id": 1, "attempt": 1, "proc_mem": 2.5}], "jobs[0].proc_mem"),
])
def test_hostile_fields_are_refused_by_name(gpus, jobs, field) -> None:  # noqa: ANN001
    with pytest.raises(ProtocolError) as err:
        check_report(1.7e9, gpus, jobs)
    assert err.value.field == field


def test_a_missing_sample_time_is_refused() -> None:
    with pytest.raises(ProtocolError) as err:
        check_report(None, [gpu()], [])
    assert err.value.field == "sampled_at"
