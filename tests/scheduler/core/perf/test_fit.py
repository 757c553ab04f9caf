"""Fitting: recovers a known model, is deterministic, borrows what it cannot see."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from scheduler.core.perf.catalog import CATALOG, spec_for
from scheduler.core.perf.data import ProfileRun, load_profile
from scheduler.core.perf.fit import NVLINK, FitError, fit_all, fit_forward, fit_model, identifiable
from scheduler.core.perf.model import ForwardCurve, ModelInputs, components, features
from scheduler.core.perf.plans import Plan

from tests.scheduler.core.perf.conftest import SYNTHETIC_COEFFS, SYNTHETIC_ENV

BERT = spec_for("bert")
TRUE_FWD = ForwardCurve(12.0, 210.0)
CODES = {"none": 0, "zero-offload": 1, "zero-dp": 2}


def synthetic_runs(configs, coeffs=SYNTHETIC_COEFFS, fwd=TRUE_FWD, env=SYNTHETIC_ENV) -> list[ProfileRun]:
    """Profiling runs measured on a machine that follows the model exactly."""
    inputs = ModelInputs(BERT.params_mi, BERT.global_batch, BERT.seq_hid, BERT.layers)
    rows = [(Plan(memory=m), (g,), float(th), env.net_gbps) for m, g, th in configs]
    c = components(features(rows), inputs, coeffs, fwd, env)
    return [
        ProfileRun(nodes=1, gpus=g, params_mi=BERT.params_mi, threads=th, zero_type=CODES[m], is_tp=0, is_pp=0,
                   forward_ms=float(c["fwd"][i]), sync_ms=float(c["sync"][i]), opt_ms=float(c["opt"][i]),
                   iter_ms=float(c["total"][i]), strategy=f"11{int(m == 'zero-offload')}{CODES[m]}",
                   source=f"synthetic:{i + 2}")
        for i, (m, g, th) in enumerate(configs)
    ]


MIXED = [("none", 8, 1), ("none", 4, 1), ("none", 2, 1), ("zero-offload", 8, 4), ("zero-offload", 4, 4),
         ("zero-offload", 2, 4), ("zero-offload", 1, 4)]


def test_forward_curve_recovers_amdahl_law() -> None:
    runs = synthetic_runs(MIXED)
    fwd = fit_forward(runs)
    n = np.array([1, 2, 3, 8, 16])
    assert np.allclose(fwd.at(n), TRUE_FWD.at(n), rtol=1e-3)


def test_forward_curve_shrugs_off_one_bad_row() -> None:
    runs = synthetic_runs(MIXED)
    runs[1] = dataclasses.replace(runs[1], forward_ms=runs[1].forward_ms / 15)  # like t5's 4 ms at 4 GPUs
    fwd = fit_forward(runs)
    assert fwd.at(4.0) == pytest.approx(TRUE_FWD.at(4.0), rel=0.05)


def test_fit_reproduces_a_model_generated_profile() -> None:
    runs = synthetic_runs(MIXED)
    result = fit_model(BERT, runs, SYNTHETIC_ENV)
    check = [(Plan(memory=m), (g,), float(th), 6.89) for m, g, th in
             [("none", 1, 1), ("none", 3, 1), ("zero-offload", 3, 4), ("zero-dp", 8, 1), ("zero-offload", 8, 16)]]
    inputs = ModelInputs(BERT.params_mi, BERT.global_batch, BERT.seq_hid, BERT.layers)
    truth = components(features(check), inputs, SYNTHETIC_COEFFS, TRUE_FWD, SYNTHETIC_ENV)["total"]
    fitted = components(features(check), result.inputs, result.coeffs, result.forward, SYNTHETIC_ENV)["total"]
    assert np.allclose(fitted, truth, rtol=0.02)
    assert result.borrowed == ()
    assert result.env.nvlink_gbps == pytest.approx(SYNTHETIC_ENV.nvlink_gbps, rel=0.05)


def test_fit_recovers_the_intra_node_bandwidth_the_runs_were_measured_at() -> None:
    """Runs from a node whose collectives reach 40 GB/s, fitted from the
    150 GB/s default: the fit finds 40, and predicts multi-node placements
    (which mix the intra- and inter-node rings) as the true model does."""
    slow = dataclasses.replace(SYNTHETIC_ENV, nvlink_gbps=40.0)
    result = fit_model(BERT, synthetic_runs(MIXED, env=slow), SYNTHETIC_ENV)
    assert result.env.nvlink_gbps == pytest.approx(40.0, rel=0.05)
    check = [(Plan(memory=m), where, 1.0, 6.89) for m, where in
             [("none", (4, 4)), ("zero-dp", (2, 3, 3)), ("none", (8,))]]
    inputs = ModelInputs(BERT.params_mi, BERT.global_batch, BERT.seq_hid, BERT.layers)
    truth = components(features(check), inputs, SYNTHETIC_COEFFS, TRUE_FWD, slow)["total"]
    fitted = components(features(check), result.inputs, result.coeffs, result.forward, result.env)["total"]
    assert np.allclose(fitted, truth, rtol=0.02)
    # A starting value outside the fitted range starts from its bound.
    wild = fit_model(BERT, synthetic_runs(MIXED, env=slow), dataclasses.replace(SYNTHETIC_ENV, nvlink_gbps=1000.0))
    assert wild.env.nvlink_gbps == pytest.approx(40.0, rel=0.05)
    held = fit_model(BERT, synthetic_runs(MIXED, env=slow), SYNTHETIC_ENV, fit_nvlink=False)
    assert held.env.nvlink_gbps == SYNTHETIC_ENV.nvlink_gbps and NVLINK not in held.borrowed


def test_fit_is_deterministic() -> None:
    runs = synthetic_runs(MIXED)
    assert fit_model(BERT, runs, SYNTHETIC_ENV) == fit_model(BERT, list(runs), SYNTHETIC_ENV)


def test_offload_only_profiles_cannot_identify_gpu_optimizer_or_backward() -> None:
    offload_only = synthetic_runs([c for c in MIXED if c[0] == "zero-offload"])
    assert identifiable(offload_only) == {"k_sync", "k_const", "k_os_offload", "k_off", "k_swap"}
    dp_only = synthetic_runs([c for c in MIXED if c[0] == "none"])
    assert identifiable(dp_only) == {"k_sync", "k_const", "k_opt", "k_bwd", NVLINK}
    # Communication and backward are told apart by runs without offload at
    # three GPU counts above one (one GPU does not communicate).
    assert NVLINK not in identifiable(synthetic_runs([("none", 8, 1), ("none", 4, 1), ("none", 1, 1),
                                                      ("zero-offload", 2, 4)]))
    assert NVLINK in identifiable(synthetic_runs([("none", 8, 1), ("none", 4, 1), ("zero-dp", 2, 1)]))
    result = fit_model(BERT, offload_only, SYNTHETIC_ENV, fallback={"k_bwd": 1.5, "k_opt": 0.3, NVLINK: 60.0})
    assert result.borrowed == ("k_bwd", "k_opt", NVLINK)
    assert (result.coeffs.k_bwd, result.coeffs.k_opt, result.env.nvlink_gbps) == (1.5, 0.3, 60.0)


def test_fit_all_borrows_the_median_of_models_that_identify_it() -> None:
    full = synthetic_runs(MIXED)
    offload_only = synthetic_runs([c for c in MIXED if c[0] == "zero-offload"])
    fits = fit_all({"bert": (BERT, full), "vit": (spec_for("vit"), full),
                    "llama7": (spec_for("llama7"), offload_only)}, SYNTHETIC_ENV)
    donors = [fits["bert"].coeffs.k_opt, fits["vit"].coeffs.k_opt]
    assert fits["llama7"].coeffs.k_opt == pytest.approx(float(np.median(donors)))
    assert fits["llama7"].env.nvlink_gbps == pytest.approx(
        float(np.median([fits["bert"].env.nvlink_gbps, fits["vit"].env.nvlink_gbps])))
    assert fits["llama7"].borrowed == ("k_bwd", "k_opt", NVLINK)


@pytest.mark.parametrize(
    ("runs", "message"),
    [
        (lambda: synthetic_runs(MIXED[:1]), "at least 2 profiling runs"),
        (lambda: synthetic_runs([("none", 8, 1), ("zero-offload", 8, 4)]), "two GPU counts"),
        (lambda: [synthetic_runs(MIXED)[0], dataclasses.replace(synthetic_runs(MIXED)[1], params_mi=1.0)],
         "disagree on parameter_size"),
    ],
)
def test_fit_rejects_unusable_profiles(runs, message) -> None:
    with pytest.raises(FitError, match=message):
        fit_model(BERT, runs(), SYNTHETIC_ENV)


def test_fit_from_traces_is_deterministic(morphling) -> None:
    profiles = {n: (s, load_profile(morphling / "profiles" / s.profile)) for n, s in CATALOG.items()}
    first, second = fit_all(profiles, SYNTHETIC_ENV), fit_all(dict(reversed(list(profiles.items()))), SYNTHETIC_ENV)
    assert first == second
