"""Where the shared trace files are, for tests that replay them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


REPO = Path(__file__).resolve().parents[2]


def traces_dir() -> Path:
    """``$GPUSCHED_TRACES_DIR`` or ``../shared/traces`` next to the repository."""
    return Path(os.environ.get("GPUSCHED_TRACES_DIR") or REPO.parent / "shared" / "traces")


def require_trace(relative: str) -> Path:
    """Path of a shared trace file; skip when absent, but fail under CI=true."""
    path = traces_dir() / relative
    if not path.exists():
        message = f"trace {relative} not found under {traces_dir()} (set GPUSCHED_TRACES_DIR)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return path
