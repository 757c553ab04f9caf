"""Where the Pollux study's data is, for the tests that need it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[4]


def pollux_root() -> Path:
    """``<traces>/pollux``; skips (fails under ``CI=true``) when absent."""
    base = Path(os.environ.get("GPUSCHED_TRACES_DIR") or REPO.parent / "shared" / "traces")
    root = base / "pollux"
    if not (root / "apps").is_dir():
        message = f"Pollux traces not found at {root} (set GPUSCHED_TRACES_DIR to the shared traces folder)"
        if os.environ.get("CI", "").strip().lower() == "true":
            pytest.fail(message + "; CI=true requires them", pytrace=False)
        pytest.skip(message)
    return root
