"""Delivery for real: email to an SMTP server in process, signed webhooks to a local HTTP server, retries, refusals."""

from __future__ import annotations

import hashlib
import hmac
import json

import pytest
from django.utils import timezone

from notifications import services, tasks
from notifications.models import Delivery, JobPreference, Preference, Webhook
from scheduler.models import JobEvent
from tests.support.placed_jobs import placed_job
from tests.support.live_helpers import make_node, make_user

pytestmark = pytest.mark.django_db


@pytest.fixture
def job(no_triggers):  # noqa: ANN001
    make_node("n1", 2)
    owner = make_user("alice")  # alice@example.org
    return placed_job(owner, {"n1": [0]})


def event(job, from_state: str, to_state: str, reason: str = "") -> int:  # noqa: ANN001
    return JobEvent.objects.create(job=job, at=timezone.now(), from_state=from_state, to_state=to_state,
                                   reason=reason, message="exit 0").pk


def test_nothing_is_sent_until_the_user_chooses(job, smtp_server) -> None:
    tasks.dispatch.apply(args=[[event(job, "RUNNING", "FAILED")]])
    assert smtp_server == [] and not Delivery.objects.exists()


def test_the_chosen_events_are_emailed_to_the_owner(job, smtp_server) -> None:
    Preference.objects.create(user=job.owner, email_events=["finished", "failed"])
    ids = [event(job, "STARTING", "RUNNING"), event(job, "RUNNING", "COMPLETED", "Completed")]
    assert tasks.dispatch.apply(args=[ids]).successful()
    assert len(smtp_server) == 1  # started was not chosen
    mail = smtp_server[0]
    assert mail["To"] == "alice@example.org" and f"job {job.pk}" in mail["Subject"] and "finished" in mail["Subject"]
    assert "RUNNING -> COMPLETED" in mail.get_payload()
    delivery = Delivery.objects.get()
    assert (delivery.channel, delivery.event, delivery.status) == ("email", "finished", "delivered")


def test_a_job_of_its_own_overrides_the_default(job, smtp_server) -> None:
    Preference.objects.create(user=job.owner, email_events=["finished"])
    JobPreference.objects.create(job=job, email_events=["started"])
    tasks.dispatch.apply(args=[[event(job, "STARTING", "RUNNING"), event(job, "RUNNING", "COMPLETED")]])
    assert [m["Subject"].split(": ")[-1] for m in smtp_server] == ["started running"]


def test_a_webhook_arrives_signed_and_is_retried_after_a_500(job, receiver) -> None:
    Preference.objects.create(user=job.owner, email_events=[], webhook_events=["preempted"])
    hook = Webhook.objects.create(owner=job.owner, url=receiver.url, allow_private=True)  # loopback: an admin's flag
    receiver.answers = [500]
    tasks.dispatch.apply(args=[[event(job, "RUNNING", "PREEMPTING", "Preempted")]])
    assert len(receiver.requests) == 2  # the 500, then the retry
    for request in receiver.requests:
        expected = "sha256=" + hmac.new(hook.secret.encode(), request["body"], hashlib.sha256).hexdigest()
        assert request["headers"]["X-Gpusched-Signature"] == expected
        assert request["path"] == "/hook?team=a" and request["headers"]["Content-Type"] == "application/json"
    body = receiver.bodies()[0]
    assert (body["event"], body["job"]["id"], body["to_state"], body["reason"]) == ("preempted", job.pk, "PREEMPTING",
                                                                                    "Preempted")
    delivery = Delivery.objects.get(channel="webhook")
    assert (delivery.status, delivery.attempts, delivery.response_code) == ("delivered", 2, 200)


def test_retries_wait_longer_each_time_and_stop(job, receiver) -> None:
    assert [tasks.backoff(n) for n in range(5)] == [2.0, 4.0, 8.0, 16.0, 32.0]
    Preference.objects.create(user=job.owner, webhook_events=["failed"])
    Webhook.objects.create(owner=job.owner, url=receiver.url, allow_private=True)
    receiver.answers = [503] * 10
    tasks.dispatch.apply(args=[[event(job, "RUNNING", "FAILED")]])
    delivery = Delivery.objects.get(channel="webhook")
    assert len(receiver.requests) == tasks.MAX_TRIES
    assert (delivery.status, delivery.attempts, delivery.response_code) == ("failed", tasks.MAX_TRIES, 503)


def test_a_client_error_is_not_retried(job, receiver) -> None:
    Preference.objects.create(user=job.owner, webhook_events=["failed"])
    Webhook.objects.create(owner=job.owner, url=receiver.url, allow_private=True)
    receiver.answers = [404]
    tasks.dispatch.apply(args=[[event(job, "RUNNING", "FAILED")]])
    assert len(receiver.requests) == 1 and Delivery.objects.get(channel="webhook").status == "failed"


def test_a_private_address_is_refused_at_delivery_without_the_admin_flag(job, receiver) -> None:
    Preference.objects.create(user=job.owner, webhook_events=["failed"])
    Webhook.objects.create(owner=job.owner, url=receiver.url)  # e.g. saved while the name resolved elsewhere
    tasks.dispatch.apply(args=[[event(job, "RUNNING", "FAILED")]])
    delivery = Delivery.objects.get(channel="webhook")
    assert receiver.requests == []
    assert delivery.status == "refused" and "loopback address" in delivery.error


def test_an_smtp_server_that_is_down_is_logged_for_the_owner(job, settings) -> None:
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", 1
    Preference.objects.create(user=job.owner, email_events=["failed"])
    tasks.dispatch.apply(args=[[event(job, "RUNNING", "FAILED")]])
    delivery = Delivery.objects.get()
    assert delivery.status == "failed" and delivery.error


def test_the_signature_is_hmac_sha256_of_the_body() -> None:
    body = json.dumps({"a": 1}).encode()
    assert services.sign(body, "k") == "sha256=" + hmac.new(b"k", body, hashlib.sha256).hexdigest()
