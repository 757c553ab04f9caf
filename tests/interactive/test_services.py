"""Starting a session (a TE job running its server) and the writes its reports and traffic cause."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from interactive import services
from interactive.models import SessionEndpoint
from scheduler.models import Job, JobClassChoice, JobState, Quota
from scheduler.services import JobRequestInvalid, QuotaExceeded
from tests.support.live_helpers import make_node, make_user
from tests.support.placed_jobs import placed_job

pytestmark = pytest.mark.django_db


def test_a_notebook_is_a_te_job_running_jupyterlab_with_the_secret_out_of_its_command_line(no_triggers) -> None:  # noqa: ANN001
    job = services.start_session(make_user("alice"), "jupyter", num_gpus=2, time_limit=600)
    job.refresh_from_db()
    assert (job.job_class, job.session_kind, job.num_gpus, job.time_limit, job.state) == (
        JobClassChoice.TE, "jupyter", 2, 600, JobState.PENDING)
    assert "jupyter lab" in job.command and '--ServerApp.base_url="$GPUSCHED_SESSION_BASE_URL"' in job.command
    assert 'JUPYTER_TOKEN="$GPUSCHED_SESSION_SECRET"' in job.command and "--IdentityProvider.token" not in job.command


def test_a_terminal_runs_the_terminal_server_and_has_a_default_time_limit(no_triggers, settings) -> None:  # noqa: ANN001
    settings.GPUSCHED_SESSION_TIME_LIMIT = 1234
    job = services.start_session(make_user("alice"), "terminal")
    assert job.command == "exec python3 -m gpusched.terminal" and job.time_limit == 1234


def test_an_unknown_kind_is_refused_naming_the_field_and_nothing_is_written(no_triggers) -> None:  # noqa: ANN001
    with pytest.raises(JobRequestInvalid) as info:
        services.start_session(make_user("alice"), "vnc")
    assert list(info.value.errors) == ["kind"]
    assert not Job.objects.exists()


def test_bad_numbers_are_refused_like_any_job(no_triggers) -> None:  # noqa: ANN001
    with pytest.raises(JobRequestInvalid) as info:
        services.start_session(make_user("alice"), "jupyter", num_gpus=0, time_limit=0)
    assert set(info.value.errors) == {"num_gpus", "time_limit"}
    assert not Job.objects.exists()


def test_te_quotas_apply(no_triggers) -> None:  # noqa: ANN001
    alice = make_user("alice")
    Quota.objects.create(user=alice, max_te_job_gpus=1)
    with pytest.raises(QuotaExceeded):
        services.start_session(alice, "jupyter", num_gpus=2)
    assert not Job.objects.exists()


def test_touch_writes_at_most_once_per_resolution(no_triggers) -> None:  # noqa: ANN001
    make_node("n1", 1)
    job = placed_job(make_user("alice"), {"n1": [0]}, session_kind="jupyter")
    now = timezone.now()
    SessionEndpoint.objects.create(job=job, attempt=1, node="n1", host="h", port=1, secret="s" * 43, ready_at=now)
    assert services.touch(job.pk, now) is True
    assert services.touch(job.pk, now + timedelta(seconds=1)) is False
    assert services.touch(job.pk, now + timedelta(seconds=services.ACTIVITY_RESOLUTION_S + 1)) is True
