"""Sending notifications: choose who gets what, send the emails, make and send the webhook deliveries."""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
from typing import Any

from django.conf import settings
from django.core.mail import send_mail

from notifications import addresses
from notifications.events import LABELS, kind_of
from notifications.models import Delivery, JobPreference, Preference, Webhook
from scheduler.models import JobEvent

log = logging.getLogger(__name__)

SIGNATURE_HEADER = "X-Gpusched-Signature"


def sign(body: bytes, secret: str) -> str:
    """The signature header's value: ``sha256=<hex HMAC-SHA256 of body with secret>``."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def choices_for(job: Any) -> tuple[list[str], list[str]]:
    """(email kinds, webhook kinds) for ``job``: its own choices, else its owner's default."""
    own = JobPreference.objects.filter(job=job).first()
    if own is not None:
        return own.email_events, own.webhook_events
    default = Preference.objects.filter(user_id=job.owner_id).first() or Preference(user_id=job.owner_id)
    return default.email_events, default.webhook_events


def payload(event: JobEvent, kind: str) -> dict[str, Any]:
    job = event.job
    return {
        "event": kind,
        "job": {"id": job.pk, "name": job.name, "owner": job.owner.username, "state": event.to_state,
                "job_class": job.job_class, "exit_code": job.exit_code,
                "project": job.project.name if job.project_id else None},
        "from_state": event.from_state,
        "to_state": event.to_state,
        "reason": event.reason,
        "message": event.message,
        "at": event.at.isoformat(),
    }


def dispatch(event_ids: list[int]) -> list[int]:
    """Notify each event's job owner as chosen; returns the ids of webhook deliveries to send.

    Emails go out here (one per event and owner with an address); a failure is
    logged in the delivery log, never raised.
    """
    to_send: list[int] = []
    events = JobEvent.objects.filter(pk__in=event_ids).select_related("job", "job__owner", "job__project").order_by("at", "pk")
    for event in events:
        kind = kind_of(event.from_state, event.to_state, event.reason)
        if kind is None:
            continue
        email_kinds, webhook_kinds = choices_for(event.job)
        body = payload(event, kind)
        if kind in email_kinds and event.job.owner.email:
            send_email(event, kind, body)
        hooks = list(_project_hooks(event.job, kind))
        if kind in webhook_kinds:
            hooks += Webhook.objects.filter(owner_id=event.job.owner_id, project__isnull=True, active=True)
        for hook in hooks:
            # A project's delivery is logged for whoever set the webhook up, not for the job's owner.
            delivery = Delivery.objects.create(owner_id=hook.owner_id, channel=Delivery.Channel.WEBHOOK,
                                               webhook=hook, job=event.job, event=kind, target=hook.url,
                                               body=json.dumps(body, separators=(",", ":")))
            to_send.append(delivery.pk)
    return to_send


def _project_hooks(job: Any, kind: str) -> list[Webhook]:
    """The active webhooks of ``job``'s project that take ``kind`` events."""
    if job.project_id is None:
        return []
    return [h for h in Webhook.objects.filter(project_id=job.project_id, active=True) if kind in h.events]


def send_email(event: JobEvent, kind: str, body: dict[str, Any]) -> Delivery:
    job = event.job
    subject = f"[gpusched] job {job.pk} {job.name[:60]}: {LABELS[kind].split(' (')[0]}"
    text = (f"Job {job.pk} ({job.name}) {LABELS[kind].split(' (')[0]}: {event.from_state or '-'} -> {event.to_state}"
            f"{' (' + event.reason + ')' if event.reason else ''}.\n{event.message}\n\nAt {event.at.isoformat()}.\n")
    delivery = Delivery(owner_id=job.owner_id, channel=Delivery.Channel.EMAIL, job=job, event=kind,
                        target=job.owner.email, body=json.dumps(body, separators=(",", ":")), attempts=1)
    try:
        send_mail(subject, text, settings.DEFAULT_FROM_EMAIL, [job.owner.email])
        delivery.status = Delivery.Status.DELIVERED
    except Exception as exc:  # SMTP down or refusing: logged for the owner, never raised to the queue
        delivery.status, delivery.error = Delivery.Status.FAILED, str(exc)[:500]
        log.warning("email for job %s to %s failed: %s", job.pk, job.owner.email, exc)
    delivery.save()
    return delivery


class Outcome:
    DELIVERED, RETRY, FAILED, REFUSED = "delivered", "retry", "failed", "refused"


def send_webhook(delivery: Delivery, *, last_try: bool) -> str:
    """POST one delivery; records the try and returns an ``Outcome``.

    The URL is checked again now (DNS rebinding) and the request goes to the
    address that passed. 2xx: delivered; 5xx, 429 or no answer: retry (failed
    on the last try); another status: failed; a refused URL: refused.
    """
    hook = delivery.webhook
    delivery.attempts += 1
    if hook is None or not hook.active:
        return _record(delivery, Outcome.FAILED, error="the webhook was deleted or disabled")
    body = delivery.body.encode()
    try:
        target = addresses.check(hook.url, allow_private=hook.allow_private)
    except addresses.RefusedUrl as exc:
        return _record(delivery, Outcome.REFUSED, error=str(exc))
    headers = {"Content-Type": "application/json", "User-Agent": "gpusched-webhook/1",
               SIGNATURE_HEADER: sign(body, hook.secret), "X-Gpusched-Event": delivery.event,
               "X-Gpusched-Delivery": str(delivery.pk)}
    try:
        status = addresses.pinned_post(target, body, headers)
    except Exception as exc:  # connection refused, timeout, TLS: worth another try
        return _record(delivery, Outcome.FAILED if last_try else Outcome.RETRY, error=str(exc))
    if 200 <= status < 300:
        return _record(delivery, Outcome.DELIVERED, code=status)
    retryable = status >= 500 or status == 429
    outcome = Outcome.RETRY if retryable and not last_try else Outcome.FAILED
    return _record(delivery, outcome, code=status, error=f"HTTP {status}")


def _record(delivery: Delivery, outcome: str, *, code: int | None = None, error: str = "") -> str:
    delivery.status = {Outcome.DELIVERED: Delivery.Status.DELIVERED, Outcome.RETRY: Delivery.Status.RETRYING,
                       Outcome.FAILED: Delivery.Status.FAILED, Outcome.REFUSED: Delivery.Status.REFUSED}[outcome]
    delivery.response_code = code
    delivery.error = error[:500]
    delivery.save(update_fields=["attempts", "status", "response_code", "error", "updated_at"])
    return outcome
