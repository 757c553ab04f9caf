"""Notifications through the real system: a job runs on a real agent, the real Celery worker sends the
email to an SMTP server in this process and the signed webhook to a local HTTP server."""

from __future__ import annotations

import hashlib
import hmac
import socket

import pytest

from notifications.models import Delivery, Preference, Webhook
from scheduler.models import JobState
from tests.e2e.conftest import wait_until
from tests.support.live_helpers import make_user, submit


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


SMTP_PORT = _free_port()

pytestmark = [pytest.mark.e2e, pytest.mark.postgres, pytest.mark.redis,
              pytest.mark.worker_env(EMAIL_HOST="127.0.0.1", EMAIL_PORT=SMTP_PORT)]


@pytest.fixture
def mailbox():  # noqa: ANN201
    from aiosmtpd.controller import Controller
    from aiosmtpd.handlers import Message

    received: list = []

    class Keep(Message):
        def handle_message(self, message) -> None:  # noqa: ANN001
            received.append(message)

    controller = Controller(Keep(), hostname="127.0.0.1", port=SMTP_PORT)
    controller.start()
    yield received
    controller.stop()


def test_a_finished_job_emails_its_owner_and_calls_the_webhook_signed(live, mailbox) -> None:
    from tests.notifications.conftest import Receiver

    receiver = Receiver()
    try:
        node = live.start_agent("notify", 1)
        live.wait_nodes_up(node)
        owner = make_user("nora")
        Preference.objects.create(user=owner, email_events=["started", "finished"], webhook_events=["finished"])
        hook = Webhook.objects.create(owner=owner, url=receiver.url, allow_private=True)  # loopback: an admin's flag
        job = submit(owner, "notified", command="echo hello", num_gpus=1)
        wait_until(lambda: Delivery.objects.filter(job=job, channel="webhook", status="delivered").exists(),
                   "the webhook delivery")
        wait_until(lambda: len(mailbox) >= 2, "two emails")
        job.refresh_from_db()
        assert job.state == JobState.COMPLETED
        subjects = sorted(m["Subject"] for m in mailbox)
        assert all(m["To"] == "nora@example.org" for m in mailbox)
        assert [s.rsplit(": ", 1)[1] for s in subjects] == ["finished", "started running"]
        (request,) = receiver.requests
        expected = "sha256=" + hmac.new(hook.secret.encode(), request["body"], hashlib.sha256).hexdigest()
        assert request["headers"]["X-Gpusched-Signature"] == expected
        assert receiver.bodies()[0]["event"] == "finished" and receiver.bodies()[0]["job"]["id"] == job.pk
    finally:
        receiver.server.shutdown()
        receiver.server.server_close()
