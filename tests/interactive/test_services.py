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


@pytest.mark.redis
def test_working_in_a_session_ends_its_idle_spell_so_idle_reclaim_leaves_it(
        redis_url, settings, sent, django_capture_on_commit_callbacks) -> None:  # noqa: ANN001
    """A notebook whose GPUs rest while its owner works in it through the portal is not ended: activity ends
    the idle spell and the warning, as a busy GPU does. The same marks without the activity end it."""
    import time

    import redis as redis_lib

    from cluster.models import GpuPolicy
    from scheduler import idleness, loop
    from tests.support.live_helpers import submit

    settings.REDIS_URL = redis_url
    marks = redis_lib.Redis.from_url(redis_url)
    marks.delete(idleness.IDLE_KEY, idleness.WARNED_KEY)
    GpuPolicy.objects.create(pk=1, idle_after_s=60, idle_grace_s=30)
    make_node("n1", 2)
    alice = make_user("alice")
    sessions = [placed_job(alice, {"n1": [i]}, job_class="TE", session_kind="jupyter") for i in (0, 1)]
    for job in sessions:
        SessionEndpoint.objects.create(job=job, attempt=1, node="n1", host="h", port=1, secret="s" * 43,
                                       ready_at=timezone.now())
        key = idleness.field(job.pk, 1)
        marks.hset(idleness.IDLE_KEY, key, f"n1 {time.time() - 100}")
        marks.hset(idleness.WARNED_KEY, key, f"{time.time() - 31}")  # warned, its grace over
    submit(alice, "waiting", num_gpus=1)  # someone waits for a GPU
    used, left = sessions
    assert services.touch(used.pk, timezone.now())  # its owner works in it
    with django_capture_on_commit_callbacks(execute=True):
        loop.run_cycle()
    used.refresh_from_db()
    left.refresh_from_db()
    assert used.state == JobState.RUNNING and marks.hget(idleness.IDLE_KEY, idleness.field(used.pk, 1)) is None
    assert marks.hget(idleness.WARNED_KEY, idleness.field(used.pk, 1)) is None
    assert left.state == JobState.CANCELLING  # idle, warned and untouched: reclaimed
    marks.delete(idleness.IDLE_KEY, idleness.WARNED_KEY)
