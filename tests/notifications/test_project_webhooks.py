"""A project's webhook: every job charged to the project, for the events staff chose for it, signed like any
webhook; a user's own webhooks and choices are untouched by it, and it is never listed or deletable as theirs."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from notifications import hooks, tasks
from notifications.models import Delivery, Webhook
from scheduler.models import JobEvent, Membership, Project
from tests.support.live_helpers import make_node, make_user
from tests.support.placed_jobs import placed_job

pytestmark = pytest.mark.django_db


@pytest.fixture
def setup(no_triggers, receiver):  # noqa: ANN001, ANN201
    make_node("n1", 3)
    alice, admin = make_user("alice"), make_user("admin", is_staff=True)
    vision = Project.objects.create(name="vision")
    Membership.objects.create(project=vision, user=alice, is_default=True)
    charged = placed_job(alice, {"n1": [0]}, project=vision)
    uncharged = placed_job(alice, {"n1": [1]})
    hook = Webhook.objects.create(owner=admin, project=vision, url=receiver.url, allow_private=True,
                                  events=["failed"])
    return charged, uncharged, hook, admin


def event(job, to_state: str) -> int:  # noqa: ANN001
    return JobEvent.objects.create(job=job, at=timezone.now(), from_state="RUNNING", to_state=to_state).pk


def test_a_project_job_s_chosen_event_reaches_the_project_s_webhook_only(setup, receiver) -> None:  # noqa: ANN001
    charged, uncharged, hook, admin = setup
    tasks.dispatch.apply(args=[[event(charged, "FAILED"), event(charged, "COMPLETED"), event(uncharged, "FAILED")]])
    bodies = receiver.bodies()
    assert [(b["event"], b["job"]["id"], b["job"]["project"]) for b in bodies] == [("failed", charged.pk, "vision")]
    delivery = Delivery.objects.get()
    assert (delivery.owner, delivery.webhook, delivery.status) == (admin, hook, "delivered")  # the admin's log


def test_a_project_webhook_is_a_reason_to_queue_and_a_user_s_hooks_stay_theirs(setup, monkeypatch) -> None:  # noqa: ANN001
    charged, uncharged, hook, admin = setup
    sent: list[list[int]] = []
    monkeypatch.setattr(tasks.dispatch, "apply_async", lambda args, queue: sent.append(args[0]))
    ids = [event(charged, "FAILED"), event(uncharged, "FAILED")]
    for pk in ids:
        hooks._enqueue([pk])
    assert sent == [[ids[0]]]  # nobody listens to the uncharged job


def test_a_project_webhook_is_not_the_staff_member_s_own(setup, api_as, browser_as) -> None:  # noqa: ANN001
    _, _, hook, admin = setup
    assert api_as(admin).get("/api/v1/webhooks/").json() == []
    assert api_as(admin).delete(f"/api/v1/webhooks/{hook.pk}/").status_code == 404
    assert hook.url not in browser_as(admin).get("/account/notifications/").content.decode()
    assert Webhook.objects.filter(pk=hook.pk).exists()


@pytest.mark.parametrize("project, events, field", [(True, ["boom"], "events"), (False, ["failed"], "events")])
def test_events_are_known_names_and_only_on_a_project_webhook(no_triggers, project, events, field) -> None:  # noqa: ANN001
    owner = make_user("bob")
    hook = Webhook(owner=owner, url="https://93.184.216.34/h", events=events,
                   project=Project.objects.create(name="p") if project else None)
    with pytest.raises(ValidationError) as caught:
        hook.full_clean()
    assert field in caught.value.message_dict
