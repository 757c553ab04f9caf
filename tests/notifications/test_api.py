"""The notifications API: each user reads and changes only their own defaults, webhooks and deliveries;
a job's choices are seen by whoever sees the job and changed by its owner alone; bad input is refused
under its field with nothing written; a webhook's secret is shown once."""

from __future__ import annotations

import pytest

from notifications.api import MAX_WEBHOOKS
from notifications.models import Delivery, JobPreference, Preference, Webhook

pytestmark = pytest.mark.django_db

PUBLIC = "https://93.184.216.34/hook"


@pytest.fixture
def hooks(roles):  # noqa: ANN001, ANN201
    mine = Webhook.objects.create(owner=roles.owner, url="https://93.184.216.35/alices-hook")
    theirs = Webhook.objects.create(owner=roles.other, url="https://93.184.216.34/bobs-hook")
    Delivery.objects.create(owner=roles.other, channel="webhook", webhook=theirs, event="failed",
                            target=theirs.url, status="delivered", response_code=200)
    Delivery.objects.create(owner=roles.owner, channel="email", event="finished", target="alice@example.org",
                            status="delivered")
    return mine, theirs


@pytest.mark.parametrize("path", ["/api/v1/notifications/", "/api/v1/webhooks/", "/api/v1/deliveries/"])
def test_anonymous_callers_get_nothing(api_as, path) -> None:  # noqa: ANN001
    assert api_as(None).get(path).status_code in (401, 403)


def test_the_defaults_are_the_caller_s_and_replaced_whole(roles, api_as) -> None:  # noqa: ANN001
    client = api_as(roles.owner)
    first = client.get("/api/v1/notifications/").json()
    assert first["email"] == "alice@example.org" and first["webhook_events"] == []
    answer = client.put("/api/v1/notifications/", {"email_events": ["failed", "started"], "webhook_events": []},
                        format="json")
    assert answer.status_code == 200 and answer.json()["email_events"] == ["started", "failed"]
    assert Preference.objects.get(user=roles.owner).email_events == ["started", "failed"]
    assert not Preference.objects.filter(user=roles.other).exists()


@pytest.mark.parametrize("body, field", [
    ({"email_events": ["boom"], "webhook_events": []}, "email_events"),
    ({"email_events": "started", "webhook_events": []}, "email_events"),
    ({"email_events": [], "webhook_events": [{"x": 1}]}, "webhook_events"),
    ({"email_events": []}, "webhook_events"),
])
def test_bad_choices_are_refused_by_field_and_nothing_is_saved(roles, api_as, body, field) -> None:  # noqa: ANN001
    answer = api_as(roles.owner).put("/api/v1/notifications/", body, format="json")
    assert answer.status_code == 400 and field in answer.json()["errors"]
    assert not Preference.objects.filter(user=roles.owner).exists()


def test_webhooks_and_deliveries_list_only_the_caller_s_and_never_a_secret(roles, api_as, hooks) -> None:  # noqa: ANN001
    client = api_as(roles.owner)
    listed = client.get("/api/v1/webhooks/").json()
    assert [h["url"] for h in listed] == [hooks[0].url] and "secret" not in listed[0]
    deliveries = client.get("/api/v1/deliveries/").json()
    assert [d["target"] for d in deliveries] == ["alice@example.org"]
    staff = api_as(roles.staff)
    assert staff.get("/api/v1/webhooks/").json() == [] and staff.get("/api/v1/deliveries/").json() == []


def test_a_new_webhook_answers_its_secret_once(roles, api_as) -> None:  # noqa: ANN001
    client = api_as(roles.owner)
    made = client.post("/api/v1/webhooks/", {"url": PUBLIC}, format="json")
    assert made.status_code == 201
    hook = Webhook.objects.get(owner=roles.owner)
    assert made.json()["secret"] == hook.secret and not hook.allow_private
    assert "secret" not in client.get("/api/v1/webhooks/").json()[0]


@pytest.mark.parametrize("body, message", [
    ({"url": "http://127.0.0.1:8000/hook"}, "loopback"),
    ({"url": "http://169.254.169.254/latest/"}, "link-local"),
    ({"url": "http://10.0.0.8/"}, "private"),
    ({"url": "not a url"}, "valid URL"),
    ({"url": "https://93.184.216.34/hook", "allow_private": True, "secret": "mine"}, None),
    ({}, "required"),
])
def test_hostile_webhooks_are_refused_under_url_and_nothing_is_written(roles, api_as, body, message) -> None:  # noqa: ANN001
    answer = api_as(roles.owner).post("/api/v1/webhooks/", body, format="json")
    if message is None:  # read-only fields are ignored: an owner cannot allow private addresses or pick a secret
        hook = Webhook.objects.get(owner=roles.owner)
        assert answer.status_code == 201 and not hook.allow_private and hook.secret != "mine"
        return
    assert answer.status_code == 400 and message in " ".join(answer.json()["errors"]["url"])
    assert not Webhook.objects.exists()


def test_a_user_has_at_most_a_few_webhooks(roles, api_as) -> None:  # noqa: ANN001
    client = api_as(roles.owner)
    for i in range(MAX_WEBHOOKS):
        assert client.post("/api/v1/webhooks/", {"url": f"{PUBLIC}/{i}"}, format="json").status_code == 201
    refused = client.post("/api/v1/webhooks/", {"url": PUBLIC}, format="json")
    assert refused.status_code == 400 and "url" in refused.json()["errors"]
    assert Webhook.objects.filter(owner=roles.owner).count() == MAX_WEBHOOKS


@pytest.mark.parametrize("role, status", [("owner", 204), ("other", 404), ("staff", 404), (None, 401)])
def test_only_the_owner_deletes_a_webhook(roles, api_as, hooks, role, status) -> None:  # noqa: ANN001
    answer = api_as(getattr(roles, role) if role else None).delete(f"/api/v1/webhooks/{hooks[0].pk}/")
    assert answer.status_code == status or (role is None and answer.status_code == 403)
    assert Webhook.objects.filter(pk=hooks[0].pk).exists() == (role != "owner")


@pytest.mark.parametrize("role, read, change", [("owner", 200, 200), ("other", 404, 404), ("staff", 200, 403),
                                               (None, 401, 401)])
def test_a_job_s_choices_read_by_who_sees_it_changed_by_its_owner(roles, api_as, make_job, role, read,
                                                                  change) -> None:  # noqa: ANN001
    job = make_job(roles.owner)
    client = api_as(getattr(roles, role) if role else None)
    got = client.get(f"/api/v1/jobs/{job.pk}/notifications/")
    assert got.status_code == read or (role is None and got.status_code == 403)
    put = client.put(f"/api/v1/jobs/{job.pk}/notifications/", {"email_events": ["failed"], "webhook_events": []},
                     format="json")
    assert put.status_code == change or (role is None and put.status_code == 403)
    assert JobPreference.objects.filter(job=job).exists() == (role == "owner")
    if role == "owner":
        assert put.json() == {"email_events": ["failed"], "webhook_events": [], "own": True}
        back = client.delete(f"/api/v1/jobs/{job.pk}/notifications/").json()
        assert back["own"] is False and not JobPreference.objects.filter(job=job).exists()


def test_a_job_that_does_not_exist_is_not_found(roles, api_as) -> None:  # noqa: ANN001
    assert api_as(roles.owner).get("/api/v1/jobs/999999/notifications/").status_code == 404
