"""GPU sources: the simulated one is seeded, plausible and steered by its control file; NVML opens or stays off."""

from __future__ import annotations

import json
from pathlib import Path

from cluster.agent.gpu_sources import SIMULATED_FB_TOTAL_MIB, SimulatedSource, open_source


def series(source: SimulatedSource, holders: dict[int, str], n: int = 10) -> list[list[dict]]:
    return [source.read(holders) for _ in range(n)]


def test_the_same_seed_gives_the_same_series_and_another_seed_another(tmp_path: Path) -> None:
    control = tmp_path / "c.json"
    a = series(SimulatedSource("n1", 2, control, seed=1), {0: "7"})
    b = series(SimulatedSource("n1", 2, control, seed=1), {0: "7"})
    c = series(SimulatedSource("n1", 2, control, seed=2), {0: "7"})
    assert a == b
    assert a != c


def test_held_gpus_are_busy_and_free_ones_idle_within_plausible_ranges(tmp_path: Path) -> None:
    readings = series(SimulatedSource("n1", 2, tmp_path / "c.json"), {0: "7"}, 20)[5:]
    busy = [r[0] for r in readings]
    idle = [r[1] for r in readings]
    assert all(50 <= g["util"] <= 100 and 0 < g["fb_used"] <= SIMULATED_FB_TOTAL_MIB for g in busy)
    assert all(g["util"] <= 2 and g["fb_used"] == 0 for g in idle)
    assert all(30 <= g["temp"] <= 90 and 60 <= g["power"] <= 700 for g in busy + idle)
    assert min(g["power"] for g in busy) > max(g["power"] for g in idle)
    assert {g["uuid"] for g in readings[0]} == {"VGPU-n1-0", "VGPU-n1-1"}


def test_the_control_file_pins_a_job_idle_and_injects_ecc_and_xid_once(tmp_path: Path) -> None:
    control = tmp_path / "c.json"
    source = SimulatedSource("n1", 2, control)
    control.write_text(json.dumps({"jobs": {"7": {"util": 0}}, "gpus": {"1": {"ecc_dbe": 2, "xid": [79, 48]}}}))
    first = source.read({0: "7"})
    assert first[0]["util"] == 0 and first[1]["ecc_dbe"] == 2
    assert source.xid_events() == [(1, 79), (1, 48)]
    assert source.xid_events() == []  # each listed Xid is reported once
    control.write_text(json.dumps({"gpus": {"1": {"xid": [79, 48, 13]}}}))
    assert source.xid_events() == [(1, 13)]
    assert source.job_memory([0], pgid=1) == first[0]["fb_used"]


def test_a_hostile_control_file_is_ignored(tmp_path: Path, caplog) -> None:  # noqa: ANN001
    control = tmp_path / "c.json"
    source = SimulatedSource("n1", 1, control)
    for text in ("[1, 2]", "{not json", json.dumps({"gpus": {"0": {"util": 1e9, "xid": ["x", -1, True]}}})):
        control.write_text(text)
        reading = source.read({})
        assert 0 <= reading[0]["util"] <= 100
        assert source.xid_events() == []


def test_nvml_is_chosen_for_real_gpus_and_its_absence_turns_telemetry_off(tmp_path: Path) -> None:
    assert isinstance(open_source("virtual", "n1", 1, tmp_path / "c"), SimulatedSource)
    # This machine has no NVIDIA driver: NVML cannot be opened, and the agent runs on without telemetry.
    assert open_source("nvml", "n1", 1, tmp_path / "c") is None
