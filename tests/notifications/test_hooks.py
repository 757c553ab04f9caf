"""Job-event writes queue one notification task after commit, never inside the transaction or for a rollback."""

from __future__ import annotations

import pytest
from django.db import transaction
from django.utils import timezone

from notifications import hooks
from scheduler import transitions
from scheduler.models import JobEvent
from tests.support.placed_jobs import placed_job
from tests.support.live_helpers import make_node, make_user

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def queued(monkeypatch) -> list[list[int]]:  # noqa: ANN001
    """The id lists handed to the broker (the queue's client replaced: a worker is not the subject here)."""
    calls: list[list[int]] = []
    monkeypatch.setattr(hooks, "_enqueue", calls.append)
    return calls


def test_single_and_bulk_event_writes_queue_after_commit_only(no_triggers, queued) -> None:
    make_node("n1", 2)
    job = placed_job(make_user("alice"), {"n1": [0]})
    queued.clear()
    with transaction.atomic():
        first = JobEvent.objects.create(job=job, at=timezone.now(), from_state="STARTING", to_state="RUNNING")
        batch = [transitions.event(job.pk, at=timezone.now(), from_state="RUNNING", to="PREEMPTING", reason="",
                                   message=""),
                 transitions.event(job.pk, at=timezone.now(), from_state="", to="PENDING", reason="", message="")]
        transitions.record_events(batch)
        assert queued == []  # nothing leaves before the commit
    assert queued == [[first.pk], [batch[0].pk]]  # the submission-like event is not notifiable
    with pytest.raises(RuntimeError), transaction.atomic():
        JobEvent.objects.create(job=job, at=timezone.now(), from_state="RUNNING", to_state="FAILED")
        raise RuntimeError("rolled back")
    assert len(queued) == 2


def test_a_task_is_queued_only_when_the_job_or_its_owner_chose_notifications(no_triggers, monkeypatch) -> None:
    from notifications.models import JobPreference, Preference
    from notifications.tasks import dispatch

    sent: list[list[int]] = []
    monkeypatch.setattr(dispatch, "apply_async", lambda args, queue: sent.append(args[0]))
    make_node("n1", 3)
    alice, bob = make_user("alice"), make_user("bob")
    quiet, chosen_by_owner, chosen_for_job = (placed_job(alice, {"n1": [0]}), placed_job(bob, {"n1": [1]}),
                                              placed_job(alice, {"n1": [2]}))
    Preference.objects.create(user=bob, email_events=["finished"])
    JobPreference.objects.create(job=chosen_for_job, email_events=["failed"])
    events = {job: JobEvent.objects.create(job=job, at=timezone.now(), from_state="RUNNING", to_state="FAILED")
              for job in (quiet, chosen_by_owner, chosen_for_job)}
    sent.clear()
    for job, event in events.items():
        hooks._enqueue([event.pk])
    assert sent == [[events[chosen_by_owner].pk], [events[chosen_for_job].pk]]  # none for the quiet job
