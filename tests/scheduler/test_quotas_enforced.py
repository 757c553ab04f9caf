"""Quotas: refusal at submission (403 naming the limit), holding at scheduling time, usage accounting."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import Group
from django.utils import timezone

from scheduler import quotas, selectors
from scheduler.models import Attempt, Job, JobState, Quota

pytestmark = pytest.mark.django_db

URL = "/api/v1/jobs/"


def submit(client, **fields):  # noqa: ANN001, ANN201
    return client.post(URL, {"name": "j", "command": "python t.py", **fields}, format="json")


def assert_refused(response, limit: str, value, usage) -> None:  # noqa: ANN001
    assert response.status_code == 403, response.content
    body = response.json()
    assert (body["limit"], body["limit_value"], body["current_usage"]) == (limit, value, usage)
    assert body["detail"] and body["scope"]


# --- submission: each limit ------------------------------------------------


def test_max_gpus_refuses_a_job_larger_than_the_limit(roles, api_as, make_job) -> None:
    Quota.objects.create(user=roles.owner, max_gpus=4)
    make_job(roles.owner, JobState.RUNNING, num_gpus=3)
    response = submit(api_as(roles.owner), num_gpus=5)
    assert_refused(response, "max_gpus", 4, 3)
    assert response.json()["requested"] == 5
    assert Job.objects.filter(owner=roles.owner).count() == 1


def test_max_gpus_accepts_a_job_that_must_wait_and_scheduling_holds_it(roles, api_as, make_job) -> None:
    Quota.objects.create(user=roles.owner, max_gpus=4)
    make_job(roles.owner, JobState.RUNNING, num_gpus=3)
    response = submit(api_as(roles.owner), num_gpus=2)
    assert response.status_code == 201
    job = Job.objects.get(pk=response.json()["id"])
    reason = quotas.blocking_reason(job, selectors.quota_usage())
    assert reason is not None and reason[0] == "QuotaExceeded" and "3 of 4 GPUs" in reason[1]


def test_max_te_gpus_counts_only_te_jobs(roles, api_as, make_job) -> None:
    Quota.objects.create(user=roles.owner, max_te_gpus=2)
    make_job(roles.owner, JobState.RUNNING, num_gpus=4, job_class="BE")
    make_job(roles.owner, JobState.RUNNING, num_gpus=1, job_class="TE")
    assert_refused(submit(api_as(roles.owner), job_class="TE", num_gpus=3), "max_te_gpus", 2, 1)
    assert submit(api_as(roles.owner), job_class="BE", num_gpus=3).status_code == 201
    te = Job.objects.get(pk=submit(api_as(roles.owner), job_class="TE", num_gpus=1).json()["id"])
    assert quotas.blocking_reason(te, selectors.quota_usage()) is None
    te2 = Job.objects.get(pk=submit(api_as(roles.owner), job_class="TE", num_gpus=2).json()["id"])
    assert quotas.blocking_reason(te2, selectors.quota_usage())[0] == "QuotaExceeded"


def test_largest_te_job(roles, api_as) -> None:
    Quota.objects.create(user=roles.owner, max_te_job_gpus=2)
    assert_refused(submit(api_as(roles.owner), job_class="TE", num_gpus=3), "max_te_job_gpus", 2, 3)
    assert submit(api_as(roles.owner), job_class="BE", num_gpus=3).status_code == 201
    assert submit(api_as(roles.owner), job_class="TE", num_gpus=2).status_code == 201


def test_longest_te_runtime_refuses_longer_and_fills_in_a_missing_limit(roles, api_as) -> None:
    Quota.objects.create(user=roles.owner, max_te_runtime=3600)
    assert_refused(submit(api_as(roles.owner), job_class="TE", time_limit=3601), "max_te_runtime", 3600, 3601)
    body = submit(api_as(roles.owner), job_class="TE").json()
    assert body["time_limit"] == 3600
    assert submit(api_as(roles.owner), job_class="TE", time_limit=60).json()["time_limit"] == 60
    assert submit(api_as(roles.owner), job_class="BE").json()["time_limit"] is None


def test_max_pending_jobs(roles, api_as, make_job) -> None:
    Quota.objects.create(user=roles.owner, max_pending_jobs=2)
    make_job(roles.owner, JobState.RUNNING)  # running jobs do not count
    assert submit(api_as(roles.owner)).status_code == 201
    assert submit(api_as(roles.owner)).status_code == 201
    assert_refused(submit(api_as(roles.owner)), "max_pending_jobs", 2, 2)
    assert Job.objects.filter(owner=roles.owner, state=JobState.PENDING).count() == 2


def test_gpu_hour_budget_counts_attempts_inside_the_rolling_period(roles, api_as, make_job) -> None:
    Quota.objects.create(user=roles.owner, gpu_hours_budget=10, budget_period_days=1)
    now = timezone.now()
    job = make_job(roles.owner, JobState.COMPLETED, num_gpus=2)
    attempt = job.attempts.get()
    # 2 GPUs x 4 h, of which 3 h fall inside the last day -> 6 GPU-hours.
    Attempt.objects.filter(pk=attempt.pk).update(started_at=now - timedelta(hours=25),
                                                 ended_at=now - timedelta(hours=21))
    old = make_job(roles.owner, JobState.COMPLETED, num_gpus=8)  # entirely before the period
    Attempt.objects.filter(job=old).update(started_at=now - timedelta(days=3), ended_at=now - timedelta(days=2))
    usage = selectors.quota_usage(now=now)
    assert usage.scopes_for(roles.owner.pk)[0].usage.gpu_hours == pytest.approx(6.0, rel=1e-6)
    assert submit(api_as(roles.owner)).status_code == 201

    running = make_job(roles.owner, JobState.RUNNING, num_gpus=4)  # 4 GPUs x 1 h so far -> 10 in all
    Attempt.objects.filter(job=running).update(started_at=now - timedelta(hours=1))
    response = submit(api_as(roles.owner))
    assert response.status_code == 403 and response.json()["limit"] == "gpu_hours_budget"
    assert response.json()["current_usage"] == pytest.approx(10.0, abs=0.01)
    pending = Job.objects.filter(owner=roles.owner, state=JobState.PENDING).get()
    assert quotas.blocking_reason(pending, selectors.quota_usage())[0] == "QuotaExceeded"


def test_quota_refusal_shows_on_the_form_field(roles, browser_as) -> None:
    Quota.objects.create(user=roles.owner, max_te_job_gpus=1)
    response = browser_as(roles.owner).post("/jobs/new/", {
        "name": "x", "command": "y", "job_class": "TE", "num_gpus": 2})
    assert response.status_code == 400
    form = response.context["form"]
    assert "max_te_job_gpus" in form.errors["num_gpus"][0]
    assert "current usage 2" in response.content.decode()
    assert Job.objects.count() == 0


def test_unlimited_by_default(roles, api_as) -> None:
    assert submit(api_as(roles.owner), num_gpus=64, job_class="BE").status_code == 201
    job = Job.objects.get()
    assert quotas.blocking_reason(job, selectors.quota_usage()) is None


# --- groups -----------------------------------------------------------------


@pytest.fixture
def team(roles) -> Group:  # noqa: ANN001
    group = Group.objects.create(name="vision")
    group.user_set.add(roles.owner, roles.other)
    return group


def test_group_usage_is_summed_over_members(roles, api_as, make_job, team) -> None:
    Quota.objects.create(group=team, max_gpus=6)
    make_job(roles.other, JobState.RUNNING, num_gpus=4)
    response = submit(api_as(roles.owner), num_gpus=3)
    assert response.status_code == 201  # fits the limit alone, so it waits
    job = Job.objects.get(pk=response.json()["id"])
    reason = quotas.blocking_reason(job, selectors.quota_usage())
    assert reason and "group vision holds 4 of 6 GPUs" in reason[1]
    assert_refused(submit(api_as(roles.owner), num_gpus=7), "max_gpus", 6, 4)
    # staff is not a member: unaffected
    assert submit(api_as(roles.staff), num_gpus=7).status_code == 201


def test_tighter_of_user_and_group_quota_wins(roles, api_as, team) -> None:
    Quota.objects.create(group=team, max_te_job_gpus=4)
    Quota.objects.create(user=roles.owner, max_te_job_gpus=8, max_te_runtime=600)
    Quota.objects.create(group=Group.objects.create(name="other-team"), max_te_runtime=60)
    response = submit(api_as(roles.owner), job_class="TE", num_gpus=5)
    assert_refused(response, "max_te_job_gpus", 4, 5)
    assert response.json()["scope"] == "group vision"
    roles.owner.groups.add(Group.objects.get(name="other-team"))
    assert submit(api_as(roles.owner), job_class="TE", num_gpus=1).json()["time_limit"] == 60


def test_group_pending_jobs_count_all_members(roles, api_as, make_job, team) -> None:
    Quota.objects.create(group=team, max_pending_jobs=2)
    make_job(roles.other)
    make_job(roles.other)
    assert_refused(submit(api_as(roles.owner)), "max_pending_jobs", 2, 2)


# --- scheduling-time snapshot ------------------------------------------------


def test_charge_makes_later_jobs_in_the_same_cycle_see_started_gpus(roles, make_job, team) -> None:
    Quota.objects.create(group=team, max_gpus=4)
    first = make_job(roles.owner, num_gpus=3)
    second = make_job(roles.other, num_gpus=2)
    usage = selectors.quota_usage()
    assert quotas.blocking_reason(first, usage) is None
    assert quotas.blocking_reason(second, usage) is None
    usage.charge(first)
    assert quotas.blocking_reason(second, usage)[0] == "QuotaExceeded"


def test_usage_snapshot_takes_a_fixed_number_of_queries(roles, make_job, team, django_assert_max_num_queries) -> None:
    from django.contrib.auth.models import User

    Quota.objects.create(group=team, max_gpus=100, gpu_hours_budget=1000, budget_period_days=3)
    for i in range(20):
        user = User.objects.create_user(f"u{i}")
        Quota.objects.create(user=user, max_gpus=8, gpu_hours_budget=50)
        team.user_set.add(user)
        make_job(user, JobState.RUNNING, num_gpus=1)
        make_job(user)
    with django_assert_max_num_queries(5):
        usage = selectors.quota_usage()
    user = User.objects.get(username="u3")
    scopes = usage.scopes_for(user.pk)
    assert [s.kind for s in scopes] == ["user", "group"]
    assert (scopes[0].usage.gpus, scopes[0].usage.pending_jobs) == (1, 1)
    assert (scopes[1].usage.gpus, scopes[1].usage.pending_jobs) == (20, 20)


def test_quota_needs_exactly_one_scope(roles) -> None:
    from django.db import IntegrityError, transaction

    with pytest.raises(IntegrityError), transaction.atomic():
        Quota.objects.create(max_gpus=1)
    with pytest.raises(IntegrityError), transaction.atomic():
        Quota.objects.create(user=roles.owner, group=Group.objects.create(name="g"), max_gpus=1)


# --- GET /api/v1/quota/ -------------------------------------------------------


def test_quota_endpoint_reports_effective_limits_and_usage(roles, api_as, make_job, team) -> None:
    Quota.objects.create(user=roles.owner, max_gpus=8, max_te_runtime=900)
    Quota.objects.create(group=team, max_gpus=6, max_pending_jobs=5)
    make_job(roles.owner, JobState.RUNNING, num_gpus=1)
    make_job(roles.other, JobState.RUNNING, num_gpus=3)
    make_job(roles.owner)
    body = api_as(roles.owner).get("/api/v1/quota/").json()
    # group: 6 - 4 = 2 left; user: 8 - 1 = 7 left -> the group's limit binds
    assert body["limits"]["max_gpus"] == 6 and body["usage"]["max_gpus"] == 4
    assert body["limits"]["max_te_runtime"] == 900 and body["limits"]["max_te_gpus"] is None
    assert body["usage"]["max_pending_jobs"] == 1
    assert body["own_usage"] == {"gpus": 1, "te_gpus": 0, "gpu_hours": body["own_usage"]["gpu_hours"],
                                 "pending_jobs": 1}
    assert [(s["scope"], s["name"]) for s in body["scopes"]] == [("user", "alice"), ("group", "vision")]
