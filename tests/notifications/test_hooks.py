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
