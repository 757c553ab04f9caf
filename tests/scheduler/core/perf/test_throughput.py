"""The policy-facing API: iter_time, iter_times, best_plan."""

from __future__ import annotations

import numpy as np
import pytest

from scheduler.core.perf.plans import PlanError
from scheduler.core.perf.throughput import ThroughputModel, packed_placement

from tests.scheduler.core.perf.conftest import synthetic_fit

ALL_DP = ["ga", "gc", "zero-dp", "zero-offload"]


def test_iter_time_is_seconds_and_memoized(synthetic_model: ThroughputModel) -> None:
    first = synthetic_model.iter_time("bert", "ga", "8")
    assert 0.01 < first < 10.0
    assert synthetic_model.iter_time("BERT", "ga", (8,)) == first
    assert synthetic_model.iter_time("bert", "ga", "8", cpus=8) == first  # one thread per GPU is the default


def test_iter_times_match_scalar_queries(synthetic_model: ThroughputModel) -> None:
    queries = [(p, pl, c, b) for p in ALL_DP for pl in ["8", "44", "1", "233"] for c in (None, 32) for b in (None, 2.0)]
    batch = synthetic_model.iter_times("bert", queries)
    fresh = ThroughputModel({"bert": synthetic_fit()})
    assert np.allclose(batch, [fresh.iter_time("bert", *q) for q in queries])


def test_bandwidth_only_matters_across_nodes(synthetic_model: ThroughputModel) -> None:
    m = synthetic_model
    assert m.iter_time("bert", "ga", "8", bandwidth=0.5) == m.iter_time("bert", "ga", "8")
    assert m.iter_time("bert", "ga", "44", bandwidth=1.0) > m.iter_time("bert", "ga", "44", bandwidth=20.0)
    with pytest.raises(PlanError, match="bandwidth"):
        m.iter_time("bert", "ga", "44", bandwidth=0)


def test_bad_queries_raise(synthetic_model: ThroughputModel) -> None:
    with pytest.raises(PlanError, match="fewer than one thread"):
        synthetic_model.iter_time("bert", "zero-offload", "8", cpus=4)
    with pytest.raises(PlanError, match="needs pp"):
        synthetic_model.iter_time("bert", "248", "8")
    with pytest.raises(KeyError, match="not fitted"):
        synthetic_model.iter_time("gpt2", "ga", "8")
    with pytest.raises(KeyError, match="unknown model"):
        synthetic_model.iter_time("resnet", "ga", "8")


def test_best_plan_is_the_fastest_feasible(synthetic_model: ThroughputModel) -> None:
    m = synthetic_model
    plan, secs = m.best_plan("bert", ALL_DP, 8, placement="44", cpus=64)
    times = {p: m.iter_time("bert", p, "44", cpus=64) for p in ALL_DP}
    assert secs == min(times.values()) and times[plan] == secs


def test_best_plan_skips_what_does_not_fit(synthetic_model: ThroughputModel) -> None:
    m = synthetic_model
    # Host memory below ZeRO-Offload's optimizer state rules it out.
    offload_only = m.best_plan("bert", ["zero-offload"], 8, cpus=64)
    assert offload_only is not None
    assert m.best_plan("bert", ["zero-offload"], 8, cpus=64, mem=10.0) is None
    # A 3D plan for another GPU count is skipped, not an error.
    plan, _ = m.best_plan("bert", ["248", "ga"], 8)
    assert plan == "ga"
    assert m.best_plan("bert", ["248"], 8) is None
    assert m.best_plan("bert", ["ga"], 8, cpus=4) is None
    with pytest.raises(PlanError, match="holds 8 GPUs, not 4"):
        m.best_plan("bert", ["ga"], 4, placement="44")


def test_best_plan_is_order_independent(synthetic_model: ThroughputModel) -> None:
    assert synthetic_model.best_plan("bert", ALL_DP, 16) == synthetic_model.best_plan("bert", ALL_DP[::-1], 16)


def test_packed_placement() -> None:
    assert packed_placement(8) == (8,)
    assert packed_placement(20) == (8, 8, 4)
    assert packed_placement(3, node_gpus=2) == (2, 1)
    with pytest.raises(PlanError):
        packed_placement(0)


def test_samples_per_second(synthetic_model: ThroughputModel) -> None:
    secs = synthetic_model.iter_time("bert", "ga", "8")
    assert synthetic_model.samples_per_second("bert", "ga", "8") == pytest.approx(32 / secs)


def test_fitted_best_plan_for_big_models_avoids_plain_data_parallel(fitted: ThroughputModel) -> None:
    # LLaMA-7B's model states (16 bytes/param, ~100 GiB) do not fit an 80 GB GPU without partitioning.
    plan, _ = fitted.best_plan("llama7", ["ga", "zero-offload"], 8, cpus=64)
    assert plan == "zero-offload"
