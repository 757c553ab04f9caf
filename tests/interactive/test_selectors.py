"""Who may reach a session (owner; staff only by the setting) and the life of a session on its page."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from interactive import selectors
from interactive.models import SessionEndpoint
from scheduler.models import Job, JobEvent, JobState
from tests.support.live_helpers import make_node, make_user
from tests.support.placed_jobs import placed_job

pytestmark = pytest.mark.django_db


@pytest.fixture
def session(no_triggers):  # noqa: ANN001
    make_node("n1", 2)
    job = placed_job(make_user("alice"), {"n1": [0]}, session_kind="jupyter", job_class="TE", time_limit=3600)
    Job.objects.filter(pk=job.pk).update(started_at=timezone.now() - timedelta(seconds=600))
    job.refresh_from_db()
    SessionEndpoint.objects.create(job=job, attempt=1, node="n1", host="10.0.0.5", port=8888, secret="s" * 43,
                                   ready_at=timezone.now() - timedelta(seconds=500))
    return job


def test_the_owner_gets_the_target_others_none(session, settings) -> None:  # noqa: ANN001
    from django.contrib.auth.models import AnonymousUser

    found = selectors.target(session.owner, session.pk)
    assert (found.origin, found.secret, found.by_staff) == ("http://10.0.0.5:8888", "s" * 43, False)
    staff = make_user("carol", is_staff=True)
    for user in (make_user("bob"), staff, AnonymousUser(), None):
        assert selectors.target(user, session.pk) is None
    settings.GPUSCHED_SESSION_STAFF_ACCESS = True
    assert selectors.target(staff, session.pk).by_staff is True
    inactive = make_user("dave", is_staff=True, is_active=False)
    assert selectors.target(inactive, session.pk) is None


def test_an_ipv6_host_is_bracketed(session) -> None:  # noqa: ANN001
    SessionEndpoint.objects.filter(job=session).update(host="fd00::5")
    assert selectors.target(session.owner, session.pk).origin == "http://[fd00::5]:8888"


def test_a_ready_session_shows_its_url_idle_time_and_time_left(session) -> None:  # noqa: ANN001
    info = selectors.status(session, timezone.now())
    assert info["phase"] == "ready" and info["url"] == f"/sessions/{session.pk}/lab"
    assert 499 <= info["idle_seconds"] <= 510 and 2990 <= info["time_left_seconds"] <= 3000
    assert "s" * 43 not in repr(info)


def test_a_queued_session_shows_its_place_and_why(no_triggers) -> None:  # noqa: ANN001
    alice = make_user("alice")
    Job.objects.create(owner=alice, name="a", command="x", num_gpus=1, job_class="TE")
    job = Job.objects.create(owner=alice, name="s", command="x", num_gpus=1, job_class="TE", session_kind="terminal",
                             pending_reason="Resources", pending_message="waiting for 1 GPU")
    info = selectors.status(job, timezone.now())
    assert (info["phase"], info["queue_position"], info["pending_reason"]) == ("queued", 2, "waiting for 1 GPU")


def test_starting_stopping_and_ended(session) -> None:  # noqa: ANN001
    SessionEndpoint.objects.all().delete()
    assert selectors.status(session, timezone.now())["phase"] == "starting"
    Job.objects.filter(pk=session.pk).update(state=JobState.CANCELLING)
    session.refresh_from_db()
    assert selectors.status(session, timezone.now())["phase"] == "stopping"
    Job.objects.filter(pk=session.pk).update(state=JobState.CANCELLED)
    JobEvent.objects.create(job=session, from_state=JobState.CANCELLING, to_state=JobState.CANCELLED,
                            reason="Cancelled", message="cancelled by alice")
    session.refresh_from_db()
    info = selectors.status(session, timezone.now())
    assert (info["phase"], info["ended_reason"], info["url"]) == ("ended", "Cancelled: cancelled by alice", None)
    Job.objects.filter(pk=session.pk).update(state=JobState.TIMEOUT)
    session.refresh_from_db()
    assert selectors.status(session, timezone.now())["ended_reason"] == "time limit reached"


def test_a_batch_job_has_no_session_status(no_triggers) -> None:  # noqa: ANN001
    make_node("n1", 1)
    assert selectors.status(placed_job(make_user("alice"), {"n1": [0]}), timezone.now()) is None


def test_a_stopped_session_says_who_stopped_it_not_how_its_server_exited(session) -> None:  # noqa: ANN001
    JobEvent.objects.create(job=session, from_state=JobState.RUNNING, to_state=JobState.CANCELLING,
                            reason="Cancelled", message="cancelled by alice")
    JobEvent.objects.create(job=session, from_state=JobState.CANCELLING, to_state=JobState.CANCELLED,
                            reason="Cancelled", message="attempt 1 on n1 exited with code 0")
    Job.objects.filter(pk=session.pk).update(state=JobState.CANCELLED)
    session.refresh_from_db()
    assert selectors.status(session, timezone.now())["ended_reason"] == "Cancelled: cancelled by alice"


def test_an_idle_reclaimed_session_says_so(session) -> None:  # noqa: ANN001
    JobEvent.objects.create(job=session, from_state=JobState.RUNNING, to_state=JobState.CANCELLING,
                            reason="IDLE_RECLAIMED", message="idle for 1800 s")
    JobEvent.objects.create(job=session, from_state=JobState.CANCELLING, to_state=JobState.CANCELLED,
                            reason="IDLE_RECLAIMED", message="attempt 1 on n1 exited with code 0")
    Job.objects.filter(pk=session.pk).update(state=JobState.CANCELLED)
    session.refresh_from_db()
    assert selectors.status(session, timezone.now())["ended_reason"] == "IDLE_RECLAIMED: idle for 1800 s"
