"""Fixtures for interactive sessions' tests: a running session job whose server is a given port, and
JupyterLab on the PATH of the agents a live test starts."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import unavailable

from tests.support.session_server import SECRET


@pytest.fixture
def make_session(make_job) -> Callable[..., Any]:  # noqa: ANN001
    """``make_session(owner, port, state=RUNNING, kind="jupyter")``: a session job with its endpoint stored."""
    from django.utils import timezone

    from interactive.models import SessionEndpoint
    from scheduler.models import JobState

    def make(owner: Any, port: int, state: str = JobState.RUNNING, kind: str = "jupyter", secret: str = SECRET) -> Any:
        job = make_job(owner, state=state, job_class="TE", session_kind=kind, command="jupyter lab")
        if state != JobState.PENDING:
            SessionEndpoint.objects.create(job=job, attempt=job.attempt_count, node="n1", host="127.0.0.1", port=port,
                                           secret=secret, ready_at=timezone.now())
        return job

    return make


@pytest.fixture
def jupyter_on_path(monkeypatch):  # noqa: ANN001, ANN201
    """Agents started now (single-user: their jobs get their PATH) find JupyterLab next to this interpreter."""
    bin_dir = str(Path(sys.executable).parent)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    if shutil.which("jupyter-lab") is None:
        unavailable("JupyterLab is not installed: pip install -e '.[sessions]'")
