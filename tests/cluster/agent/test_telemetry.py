"""The telemetry sampler: reports with every GPU and attempt; new ECC errors and Xids carried until delivered."""

from __future__ import annotations

import json
from pathlib import Path

from cluster.agent.attempt import TrackedAttempt
from cluster.agent.gpu_sources import SimulatedSource
from cluster.agent.telemetry import TelemetrySampler
from cluster.telemetry_schema import check_report


def attempt(job_id: int, gpus: list[int]) -> TrackedAttempt:
    return TrackedAttempt(job_id=job_id, attempt=1, pgid=1, start_ticks=None, started_at=0.0, grace_period=1.0,
                          time_limit=None, job_dir="/nonexistent", checkpoint_dir="/nonexistent", gpu_indices=gpus)


def test_a_report_passes_the_servers_check_and_names_each_attempt_with_its_gpus(tmp_path: Path) -> None:
    sampler = TelemetrySampler(SimulatedSource("n1", 4, tmp_path / "c.json"), interval=5.0)
    report = sampler.collect(100.0, [attempt(7, [0, 1])])
    checked = check_report(**report)
    assert [g.index for g in checked.gpus] == [0, 1, 2, 3]
    assert [(j.job_id, j.gpus) for j in checked.jobs] == [(7, (0, 1))]
    assert checked.jobs[0].proc_mem == sum(g.fb_used for g in checked.gpus[:2]) > 0
    assert not sampler.due(104.9) and sampler.due(105.0)


def test_new_errors_are_carried_until_a_report_is_delivered(tmp_path: Path) -> None:
    control = tmp_path / "c.json"
    sampler = TelemetrySampler(SimulatedSource("n1", 2, control))
    control.write_text(json.dumps({"gpus": {"1": {"ecc_dbe": 3}}}))
    baseline = sampler.collect(0.0, [])
    assert baseline["gpus"][1]["ecc_dbe_new"] == 0  # errors from before the agent started are not new
    control.write_text(json.dumps({"gpus": {"1": {"ecc_dbe": 5, "xid": [79]}}}))
    undelivered = sampler.collect(5.0, [])
    again = sampler.collect(10.0, [])  # the broker was away: the same events come again
    assert (undelivered["gpus"][1]["ecc_dbe_new"], undelivered["gpus"][1]["xid"]) == (2, [79])
    assert (again["gpus"][1]["ecc_dbe_new"], again["gpus"][1]["xid"]) == (2, [79])
    sampler.delivered()
    after = sampler.collect(15.0, [])
    assert (after["gpus"][1]["ecc_dbe_new"], after["gpus"][1]["xid"]) == (0, [])
    assert after["gpus"][1]["ecc_dbe"] == 5
