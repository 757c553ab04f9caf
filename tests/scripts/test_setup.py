"""scripts/setup.sh leaves the environment ready for sessions: JupyterLab starts
without compiling rfc3987-syntax's grammar (docs/sessions.md, "Start-up time")."""

from __future__ import annotations

import subprocess
import sys

import pytest


def test_the_environment_starts_jupyterlab_without_the_iri_grammar() -> None:
    pytest.importorskip("jupyterlab", reason="the sessions extra is not installed")
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys, jupyterlab.labapp; print('rfc3987_syntax' in sys.modules)"],
        capture_output=True, text=True, check=True, timeout=120,
    ).stdout.strip()
    assert loaded == "False", "rfc3987-syntax is installed: run scripts/setup.sh (it adds 1.3 s to every start)"
