"""The functional form: physical properties that must hold for any sane coefficients."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.core.perf.model import (
    Coeffs,
    ForwardCurve,
    _overlap,
    components,
    features,
    iter_time_ms,
    layout_3d,
)
from scheduler.core.perf.plans import PlanError, parse_plan

from tests.scheduler.core.perf.conftest import BERT_LIKE, SYNTHETIC_COEFFS, SYNTHETIC_ENV

FWD = ForwardCurve(12.0, 210.0)
DP_PLANS = ["ga", "gc", "zero-dp", "zero-offload", "zero-offload+gc"]

coeffs = st.builds(
    Coeffs,
    k_bwd=st.floats(1.0, 4.0),
    k_sync=st.floats(1.0, 20.0),
    k_opt=st.floats(1e-4, 0.5),
    k_os_offload=st.floats(0.1, 10.0),
    k_const=st.floats(0.0, 100.0),
    k_off=st.floats(0.0, 300.0),
    k_swap=st.floats(0.0, 300.0),
)
placements = st.lists(st.integers(1, 8), min_size=1, max_size=8).map(tuple)


def t(plan: str, placement, threads: float = 1.0, net: float = 6.89, k: Coeffs = SYNTHETIC_COEFFS) -> float:
    f = features([(parse_plan(plan), tuple(placement), threads, net)])
    return float(iter_time_ms(f, BERT_LIKE, k, FWD, SYNTHETIC_ENV)[0])


def test_overlap_lies_between_max_and_sum() -> None:
    a, b = np.array([10.0, 3.0, 0.0]), np.array([4.0, 3.0, 5.0])
    assert np.allclose(_overlap(a, b, 1.0), a + b)
    for gamma in (1.5, 2.0, 8.0):
        v = _overlap(a, b, gamma)
        assert np.all(v >= np.maximum(a, b) - 1e-9) and np.all(v <= a + b + 1e-9)
    assert np.allclose(_overlap(a, b, 200.0), np.maximum(a, b), rtol=1e-2)


@settings(max_examples=60, deadline=None)
@given(k=coeffs, placement=placements, plan=st.sampled_from(DP_PLANS),
       lo=st.floats(0.5, 20.0), factor=st.floats(1.0, 10.0))
def test_more_network_bandwidth_is_never_slower(k, placement, plan, lo, factor) -> None:
    assert t(plan, placement, net=lo * factor, k=k) <= t(plan, placement, net=lo, k=k) + 1e-9


@settings(max_examples=60, deadline=None)
@given(k=coeffs, placement=placements, lo=st.floats(1.0, 8.0), extra=st.floats(0.0, 32.0))
def test_cpu_threads_speed_up_offload_only(k, placement, lo, extra) -> None:
    assert t("zero-offload", placement, lo + extra, k=k) <= t("zero-offload", placement, lo, k=k) + 1e-9
    assert t("ga", placement, lo + extra, k=k) == pytest.approx(t("ga", placement, lo, k=k))


@settings(max_examples=60, deadline=None)
@given(k=coeffs, placement=placements, memory=st.sampled_from(["ga", "zero-dp", "zero-offload"]))
def test_gradient_checkpointing_costs_time(k, placement, memory) -> None:
    with_gc = "gc" if memory == "ga" else memory + "+gc"
    assert t(with_gc, placement, k=k) > t(memory, placement, k=k)


@settings(max_examples=60, deadline=None)
@given(k=coeffs, gpus=st.integers(2, 8), plan=st.sampled_from(DP_PLANS))
def test_spreading_over_nodes_is_never_faster_than_one_node(k, gpus, plan) -> None:
    one_node = t(plan, (gpus,), k=k)
    spread = t(plan, (1,) * gpus, k=k)
    assert spread >= one_node - 1e-9


def test_single_gpu_has_no_communication() -> None:
    k = SYNTHETIC_COEFFS
    c = components(features([(parse_plan("ga"), (1,), 1.0, 6.89)]), BERT_LIKE, k, FWD, SYNTHETIC_ENV)
    fwd = FWD.at(1.0)
    assert c["fwd"][0] == pytest.approx(fwd)
    assert c["sync"][0] == pytest.approx(k.k_bwd * fwd)
    assert c["opt"][0] == pytest.approx(k.k_opt * BERT_LIKE.params_mi)
    assert c["total"][0] == pytest.approx(fwd + k.k_bwd * fwd + k.k_opt * BERT_LIKE.params_mi + k.k_const)


def test_zero_dp_partitions_the_optimizer_step() -> None:
    def opt(plan: str, placement) -> float:
        f = features([(parse_plan(plan), placement, 1.0, 6.89)])
        return float(components(f, BERT_LIKE, SYNTHETIC_COEFFS, FWD, SYNTHETIC_ENV)["opt"][0])

    assert opt("zero-dp", (8,)) < opt("ga", (8,))
    assert opt("zero-dp", (1,)) == pytest.approx(opt("ga", (1,)))


def test_features_are_vectorized_consistently() -> None:
    configs = [(parse_plan(p), pl, 2.0, 6.89) for p in DP_PLANS for pl in [(1,), (4,), (2, 2), (1, 3, 4)]]
    batch = iter_time_ms(features(configs), BERT_LIKE, SYNTHETIC_COEFFS, FWD, SYNTHETIC_ENV)
    one_by_one = [float(iter_time_ms(features([c]), BERT_LIKE, SYNTHETIC_COEFFS, FWD, SYNTHETIC_ENV)[0])
                  for c in configs]
    assert np.allclose(batch, one_by_one)


@pytest.mark.parametrize(
    ("plan", "placement", "tp_cross", "dp_cross", "pp_cross"),
    [
        ("224", (8, 8), False, False, 1),           # one pipeline stage per node
        ("224", (4, 4, 4, 4), False, True, 1),      # a stage spans two nodes
        ("224", (2,) * 8, False, True, 1),
        ("344", (6,) * 8, True, True, 2),           # tensor groups of 4 straddle nodes of 6
        ("181", (8,), False, False, 0),
        ("811", (1,) * 8, False, False, 7),
        ("441", (4, 4, 4, 4), False, False, 3),
    ],
)
def test_3d_rank_layout(plan, placement, tp_cross, dp_cross, pp_cross) -> None:
    lay = layout_3d(parse_plan(plan), placement)
    assert (lay.tp_cross, lay.dp_cross, lay.pp_cross) == (tp_cross, dp_cross, pp_cross)
    assert lay.pp_cross + lay.pp_local == parse_plan(plan).pp - 1


def test_3d_plan_must_match_the_placement() -> None:
    with pytest.raises(PlanError):
        features([(parse_plan("248"), (8, 8), 1.0, 6.89)])


def test_3d_compute_scales_with_tensor_and_data_degree() -> None:
    def fwd3(plan: str, placement) -> float:
        f = features([(parse_plan(plan), placement, 1.0, 6.89)])
        return float(components(f, BERT_LIKE, SYNTHETIC_COEFFS, FWD, SYNTHETIC_ENV)["fwd"][0])

    assert fwd3("141", (4,)) == pytest.approx(FWD.at(1.0) / 4)
    assert fwd3("142", (8,)) == pytest.approx(FWD.at(1.0) / 8)
    # One micro-batch: pipeline stages run one after another, so pp adds no speed.
    assert fwd3("441", (4, 4, 4, 4)) == pytest.approx(fwd3("141", (4,)))
