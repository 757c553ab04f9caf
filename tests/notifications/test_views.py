"""The notification pages: each user sees and changes only their own settings, webhooks and deliveries;
staff see everyone's in the admin; a private-address webhook is refused with the reason."""

from __future__ import annotations

import pytest

from notifications.models import Delivery, JobPreference, Preference, Webhook

pytestmark = pytest.mark.django_db


@pytest.fixture
def data(roles):  # noqa: ANN001
    theirs = Webhook.objects.create(owner=roles.other, url="https://93.184.216.34/bobs-hook")
    Delivery.objects.create(owner=roles.other, channel="webhook", webhook=theirs, event="failed",
                            target="https://93.184.216.34/bobs-hook", status="delivered", response_code=200)
    mine = Webhook.objects.create(owner=roles.owner, url="https://93.184.216.35/alices-hook")
    Delivery.objects.create(owner=roles.owner, channel="email", event="finished", target="alice@example.org",
                            status="delivered")
    return mine, theirs


def test_the_page_shows_only_my_webhooks_and_deliveries(roles, browser_as, data) -> None:
    html = browser_as(roles.owner).get("/account/notifications/").content.decode()
    assert "alices-hook" in html and "alice@example.org" in html
    assert "bobs-hook" not in html and data[1].secret not in html


def test_defaults_are_saved_for_the_caller(roles, browser_as) -> None:
    response = browser_as(roles.owner).post("/account/notifications/", {
        "action": "defaults", "email_events": ["started", "failed"], "webhook_events": ["preempted"]})
    assert response.status_code == 302
    saved = Preference.objects.get(user=roles.owner)
    assert (saved.email_events, saved.webhook_events) == (["started", "failed"], ["preempted"])
    bad = browser_as(roles.owner).post("/account/notifications/", {"action": "defaults", "email_events": ["boom"]})
    assert bad.status_code == 400 and Preference.objects.get(user=roles.owner).email_events == ["started", "failed"]


@pytest.mark.parametrize("url, message", [
    ("http://127.0.0.1:8000/hook", "127.0.0.1, a loopback address"),
    ("http://169.254.169.254/latest/", "link-local"), ("http://10.0.0.8/", "private"),
])
def test_a_webhook_to_the_internal_network_is_refused_with_the_reason(roles, browser_as, url, message) -> None:
    response = browser_as(roles.owner).post("/account/notifications/", {"action": "webhook", "url": url})
    assert response.status_code == 400 and message in response.content.decode()
    assert not Webhook.objects.filter(owner=roles.owner).exists()


def test_a_public_webhook_is_added_with_a_secret(roles, browser_as) -> None:
    assert browser_as(roles.owner).post("/account/notifications/", {
        "action": "webhook", "url": "https://93.184.216.34/hook"}).status_code == 302
    hook = Webhook.objects.get(owner=roles.owner)
    assert len(hook.secret) == 64 and not hook.allow_private


@pytest.mark.parametrize("role, status", [("owner", 302), ("other", 404), ("staff", 404), (None, 302)])
def test_only_the_owner_deletes_a_webhook(roles, browser_as, data, role, status) -> None:
    mine = data[0]
    response = browser_as(getattr(roles, role) if role else None).post(f"/account/notifications/webhooks/{mine.pk}/delete/")
    assert response.status_code == status
    assert Webhook.objects.filter(pk=mine.pk).exists() == (role != "owner")
    if role is None:
        assert "/accounts/login/" in response["Location"]


@pytest.mark.parametrize("role, status", [("owner", 200), ("other", 404), ("staff", 200), (None, 302)])
def test_a_jobs_choices_page_follows_the_jobs_permissions(roles, browser_as, make_job, role, status) -> None:
    job = make_job(roles.owner)
    client = browser_as(getattr(roles, role) if role else None)
    assert client.get(f"/jobs/{job.pk}/notifications/").status_code == status
    posted = client.post(f"/jobs/{job.pk}/notifications/", {"email_events": ["started"]})
    assert posted.status_code == (302 if role in ("owner", "staff") else status)
    assert JobPreference.objects.filter(job=job).exists() == (role in ("owner", "staff"))


@pytest.mark.parametrize("path", ["/admin/notifications/webhook/", "/admin/notifications/delivery/"])
def test_staff_see_everyones_webhooks_and_deliveries_in_the_admin(roles, browser_as, data, path) -> None:
    html = browser_as(roles.staff).get(path).content.decode()
    assert "bobs-hook" in html and ("alices-hook" in html or "alice@example.org" in html)
    assert browser_as(roles.owner).get(path).status_code == 302  # not staff: the admin's login page
