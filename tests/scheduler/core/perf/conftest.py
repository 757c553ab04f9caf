"""Fixtures for the performance-model tests.

Tests that need the Rubick traces use ``morphling``: it skips with a message
when ``../shared/traces/morphling`` (or ``$GPUSCHED_TRACES_DIR/morphling``)
is absent, and fails instead under ``CI=true``. Everything else builds
synthetic fits and runs anywhere.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from scheduler.core.perf.__main__ import morphling_dir
from scheduler.core.perf.catalog import CATALOG
from scheduler.core.perf.data import load_authors_params, load_placements
from scheduler.core.perf.fit import FitResult
from scheduler.core.perf.holdout import row_key, sample_all
from scheduler.core.perf.model import Coeffs, Env, ForwardCurve, ModelInputs
from scheduler.core.perf.throughput import ThroughputModel
from scheduler.core.perf.validate import validate


@pytest.fixture(scope="session")
def morphling() -> Path:
    root = morphling_dir(None)
    if not (root / "profiles").is_dir() or not (root / "placements").is_dir():
        message = f"Rubick traces not found at {root} (set GPUSCHED_TRACES_DIR to the shared traces folder)"
        if os.environ.get("CI", "").strip().lower() == "true":
            pytest.fail(message + "; CI=true requires them", pytrace=False)
        pytest.skip(message)
    return root


@pytest.fixture(scope="session")
def fitted(morphling: Path) -> ThroughputModel:
    return ThroughputModel.from_traces(morphling)


@pytest.fixture(scope="session")
def placements(morphling: Path):
    return {name: load_placements(morphling / "placements" / f"{spec.placements}.csv")
            for name, spec in CATALOG.items()}


@pytest.fixture(scope="session")
def validation(fitted, placements, morphling):
    seen = {row_key(name, r) for name, rows in sample_all(placements).items() for r in rows}
    return validate(fitted, placements, load_authors_params(morphling / "profiles" / "fitted_params.csv"), seen)


SYNTHETIC_COEFFS = Coeffs(k_bwd=1.8, k_sync=2.0, k_opt=0.08, k_os_offload=1.6, k_const=15.0, k_off=30.0, k_swap=60.0)
SYNTHETIC_ENV = Env(nvlink_gbps=150.0, pcie_gbps=25.0, net_gbps=6.89)
BERT_LIKE = ModelInputs(params_mi=320.7, global_batch=32, seq_hid=1024 * 512 * 24, layers=24)


def synthetic_fit(model: str = "bert", coeffs: Coeffs = SYNTHETIC_COEFFS, inputs: ModelInputs = BERT_LIKE,
                  forward: ForwardCurve = ForwardCurve(12.0, 210.0), env: Env = SYNTHETIC_ENV) -> FitResult:
    return FitResult(model=model, coeffs=coeffs, forward=forward, inputs=inputs, env=env, runs=0, cost=0.0)


@pytest.fixture
def synthetic_model() -> ThroughputModel:
    """A bert-sized model with fixed, plausible coefficients; no traces needed."""
    return ThroughputModel({"bert": synthetic_fit()})
