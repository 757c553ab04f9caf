"""Fixtures for interactive sessions' tests: a running session job whose server is a given port."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

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
