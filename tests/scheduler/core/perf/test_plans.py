"""Execution plans and placements: parsing, validity, resource needs."""

from __future__ import annotations

import pytest

from scheduler.core.perf.plans import (
    Plan,
    PlanError,
    check_plan_fits,
    fits_gpu_memory,
    gpu_state_gb,
    parse_placement,
    parse_plan,
    plan_needs,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("ga", Plan()),
        ("gc", Plan(gc=True)),
        ("ga+gc", Plan(gc=True)),
        ("zero-dp", Plan(memory="zero-dp")),
        ("zero-offload", Plan(memory="zero-offload")),
        ("zero-offload+gc", Plan(memory="zero-offload", gc=True)),
        ("ZeRO-DP+GC", Plan(memory="zero-dp", gc=True)),
        ("248", Plan(pp=2, tp=4, dp=8)),
        (" 811 ", Plan(pp=8, tp=1, dp=1)),
    ],
)
def test_parse_plan(text: str, expected: Plan) -> None:
    assert parse_plan(text) == expected


@pytest.mark.parametrize("text", ["ga", "gc", "zero-dp", "zero-offload", "zero-dp+gc", "zero-offload+gc", "248"])
def test_plan_name_round_trips(text: str) -> None:
    assert parse_plan(text).name == text
    assert parse_plan(parse_plan(text).name) == parse_plan(text)


@pytest.mark.parametrize("text", ["", "dp", "tp+ga", "gc+gc", "zero-dp+ga", "048", "1234", "24", "zero-offload+gc+gc"])
def test_parse_plan_rejects(text: str) -> None:
    with pytest.raises(PlanError, match="plan"):
        parse_plan(text)


def test_3d_plan_gpu_count() -> None:
    assert parse_plan("248").fixed_gpus == 64
    assert parse_plan("ga").fixed_gpus is None
    assert parse_plan("248").is_3d and not parse_plan("zero-dp").is_3d


@pytest.mark.parametrize(
    ("value", "expected"),
    [("233", (2, 3, 3)), ("8", (8,)), ((4, 4), (4, 4)), ([1, 12], (1, 12))],
)
def test_parse_placement(value, expected) -> None:
    assert parse_placement(value) == expected


@pytest.mark.parametrize("value", ["", "2a3", "203", (), (2, 0), "-1", "2²", "٢٤"])
def test_parse_placement_rejects(value) -> None:
    with pytest.raises(PlanError, match="placement"):
        parse_placement(value)


def test_check_plan_fits() -> None:
    check_plan_fits(parse_plan("224"), (8, 8))
    check_plan_fits(parse_plan("ga"), (1, 2))
    with pytest.raises(PlanError, match="needs pp\\*tp\\*dp = 16 GPUs"):
        check_plan_fits(parse_plan("224"), (8,))
    with pytest.raises(PlanError, match="tensor-parallel degree 8"):
        check_plan_fits(parse_plan("181"), (4, 4))


def test_offload_needs_host_memory_for_optimizer_state() -> None:
    small, big = 300.0, 6000.0
    ga = plan_needs(parse_plan("ga"), big, (8,))
    off_small = plan_needs(parse_plan("zero-offload"), small, (8,))
    off_big = plan_needs(parse_plan("zero-offload"), big, (8,))
    assert off_big.host_mem_gb > off_small.host_mem_gb > ga.host_mem_gb
    # 16 bytes per parameter of 6000 Mi params is 93.75 GiB on top of the per-process base.
    assert off_big.host_mem_gb - ga.host_mem_gb == pytest.approx(6000 * 2**20 * 16 / 2**30)


def test_needs_cpus_and_network() -> None:
    needs = plan_needs(parse_plan("ga"), 300.0, (2, 3, 3))
    assert needs.gpus == 8 and needs.min_cpus == 8 and needs.cross_node
    assert not plan_needs(parse_plan("ga"), 300.0, (8,)).cross_node


def test_gpu_state_memory_partitioning() -> None:
    p = 6426.0
    ga, zdp, off = (gpu_state_gb(parse_plan(x), p, 8) for x in ("ga", "zero-dp", "zero-offload"))
    assert off < zdp < ga
    assert gpu_state_gb(parse_plan("248"), p, 64) == pytest.approx(ga / 8)
    assert not fits_gpu_memory(parse_plan("ga"), p, 8, 80.0)
    assert fits_gpu_memory(parse_plan("zero-offload"), p, 8, 80.0)
