"""A session endpoint names its job and attempt, never its secret."""

from __future__ import annotations

import pytest
from django.utils import timezone

from interactive.models import SessionEndpoint, SessionKind


@pytest.mark.django_db
def test_str_names_the_job_and_attempt_not_the_secret(roles, make_job) -> None:  # noqa: ANN001
    job = make_job(roles.owner, state="RUNNING", session_kind=SessionKind.JUPYTER)
    row = SessionEndpoint.objects.create(job=job, attempt=1, node="n1", host="h", port=1, secret="q" * 43,
                                         ready_at=timezone.now())
    assert str(row) == f"session endpoint of job {job.pk} attempt 1" and "q" * 43 not in str(row)
