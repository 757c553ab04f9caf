"""Every privileged action leaves its audit row (who, when, from where, what changed), shown to staff
only in the admin with filters, and a row cannot be edited there (audit.admin, audit.services and the
places that call them)."""

from __future__ import annotations

from urllib.parse import urlencode

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from audit.models import AuditEntry
from cluster import registration, tasks
from scheduler.identity import PosixIdentity
from scheduler.images import Image
from scheduler.models import Quota

pytestmark = pytest.mark.django_db
DIGEST = "sha256:" + "ef" * 32


@pytest.fixture
def boss(db) -> User:  # noqa: ANN001
    return User.objects.create_superuser("boss", "boss@example.org", "a-long-test-password-42")


def only(action: str) -> AuditEntry:
    (entry,) = AuditEntry.objects.filter(action=action)
    return entry


def test_a_quota_change_in_the_admin_records_who_where_and_before_after(roles, browser_as) -> None:
    client = browser_as(roles.staff)
    body = {"user": str(roles.other.pk), "group": "", "max_gpus": "4", "budget_period_days": "7", "note": ""}
    assert client.post("/admin/scheduler/quota/add/", body, REMOTE_ADDR="10.1.2.3").status_code == 302
    quota = Quota.objects.get()
    assert client.post(f"/admin/scheduler/quota/{quota.pk}/change/", {**body, "max_gpus": "8"}).status_code == 302
    added, changed = AuditEntry.objects.filter(action="quota.changed").order_by("id")
    assert (added.actor, added.actor_name, added.ip, added.detail) == (roles.staff, "carol", "10.1.2.3", "added")
    assert changed.changes == {"max_gpus": [4, 8]}
    assert client.post(f"/admin/scheduler/quota/{quota.pk}/delete/", {"post": "yes"}).status_code == 302
    assert only("quota.deleted").changes["max_gpus"] == [8, None]


def test_identity_and_image_changes_are_recorded(roles, browser_as, boss) -> None:
    client = browser_as(boss)
    client.post("/admin/scheduler/posixidentity/add/", {"user": roles.other.pk, "posix_name": "bsmith"})
    identity = PosixIdentity.objects.get()
    client.post(f"/admin/scheduler/posixidentity/{identity.pk}/change/", {"user": roles.other.pk,
                                                                         "posix_name": "bob2"})
    assert [e.changes.get("posix_name") for e in AuditEntry.objects.filter(action="identity.changed")
            .order_by("id")] == [[None, "bsmith"], ["bsmith", "bob2"]]
    client.post("/admin/scheduler/image/add/", {"name": "py3", "uri": "/s/py3.tar", "digest": DIGEST,
                                                "enabled": "on"})
    image = Image.objects.get()
    client.post(f"/admin/scheduler/image/{image.pk}/change/", {"name": "py3", "uri": "/s/py3.tar",
                                                               "digest": DIGEST})  # disabled
    assert AuditEntry.objects.filter(action="image.changed").order_by("id").last().changes == {
        "enabled": [True, False]}


def test_staff_cancelling_another_users_job_is_recorded_and_an_owner_cancelling_theirs_is_not(
        roles, browser_as, api_as, make_job) -> None:
    mine, theirs, by_api = make_job(roles.owner), make_job(roles.owner), make_job(roles.owner)
    browser_as(roles.owner).post(f"/jobs/{mine.pk}/cancel/")
    assert not AuditEntry.objects.exists()
    browser_as(roles.staff).post(f"/jobs/{theirs.pk}/cancel/", REMOTE_ADDR="10.9.9.9")
    api_as(roles.staff).post(f"/api/v1/jobs/{by_api.pk}/cancel/")
    page, api = AuditEntry.objects.filter(action="job.cancelled-by-staff").order_by("id")
    assert (page.actor, page.ip, page.target) == (roles.staff, "10.9.9.9", f"job {theirs.pk} of alice")
    assert api.target == f"job {by_api.pk} of alice"


def test_agent_registration_and_refusal_are_recorded(settings, sent, no_triggers, monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.setattr(tasks, "_last_refusal_audit", {})  # refusals audited by earlier tests in this process
    registration.register_node("n1", gpus=1, cpus=1, mem_gb=1, gpu_models=[], agent_version="2", now=timezone.now())
    assert only("agent.registered").actor_name == "node n1"
    settings.GPUSCHED_AGENT_DEV_MODE, settings.AGENT_SECRET = False, ""
    tasks.register(node="n2", gpus=1, token="forged")
    tasks.heartbeat(node="n2", running=[], token="forged")
    tasks.heartbeat(node="n2", running=[], token="forged")  # within the interval: logged, not audited again
    refused = AuditEntry.objects.filter(action="agent.refused").order_by("id")
    assert [e.detail.split(":")[0] for e in refused] == ["cluster.register", "cluster.heartbeat"]
    assert "no GPUSCHED_AGENT_SECRET" in refused[0].detail


@pytest.mark.parametrize("who, expected", [("anonymous", 302), ("owner", 302), ("staff", 200)])
def test_only_staff_see_the_log_with_its_filters(roles, browser_as, who, expected) -> None:
    AuditEntry.objects.create(actor_name="carol", action="quota.changed", target="quota of user bob")
    client = browser_as(None if who == "anonymous" else getattr(roles, who))
    # The date filter as the admin's own "Date" links write it: an aware time.
    since = "?" + urlencode({"at__gte": "2020-01-01 00:00:00+00:00"})
    for query in ("", "?action=quota.changed", "?actor_name=carol", since):
        assert client.get(f"/admin/audit/auditentry/{query}").status_code == expected


def test_nobody_edits_or_deletes_a_row_in_the_admin(roles, browser_as, boss) -> None:
    entry = AuditEntry.objects.create(actor_name="carol", action="quota.changed", target="quota of user bob")
    client = browser_as(boss)
    assert client.post(f"/admin/audit/auditentry/{entry.pk}/change/", {"detail": "x"}).status_code == 403
    assert client.post(f"/admin/audit/auditentry/{entry.pk}/delete/", {"post": "yes"}).status_code == 403
    assert client.post("/admin/audit/auditentry/add/", {"action": "quota.changed"}).status_code == 403
    assert AuditEntry.objects.get().detail == ""
