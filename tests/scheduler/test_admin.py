"""The admin for staff: every job, quotas with search, filters and usage beside each limit."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import Group

from scheduler.models import Job, JobState, Quota

pytestmark = pytest.mark.django_db


def test_quota_list_shows_usage_beside_each_limit(roles, browser_as, make_job) -> None:
    team = Group.objects.create(name="nlp")
    team.user_set.add(roles.owner, roles.other)
    Quota.objects.create(user=roles.owner, max_gpus=8, max_pending_jobs=3)
    Quota.objects.create(group=team, max_te_gpus=4, gpu_hours_budget=100)
    make_job(roles.owner, JobState.RUNNING, num_gpus=2, job_class="TE")
    make_job(roles.other, JobState.RUNNING, num_gpus=1, job_class="TE")
    make_job(roles.owner)
    html = browser_as(roles.staff).get("/admin/scheduler/quota/").content.decode()
    rows = {re.search(r"quota of (user|group) (\w+)", row).group(2): row
            for row in re.findall(r"<tr>.*?</tr>", html, re.S) if "quota of" in row}
    assert "2 / 8" in rows["alice"] and "1 / 3" in rows["alice"]  # GPUs held, pending jobs
    assert "3 / 4" in rows["nlp"]  # TE GPUs of both members
    assert "0.0 / 100.0" in rows["nlp"]  # no attempt has ended inside the period worth an hour yet
    assert "/ ∞" in rows["nlp"]


def test_quota_search_and_filters(roles, browser_as) -> None:
    Quota.objects.create(user=roles.owner, max_gpus=1)
    Quota.objects.create(user=roles.other, max_gpus=2)
    Quota.objects.create(group=Group.objects.create(name="robotics"), max_gpus=3)
    client = browser_as(roles.staff)

    def listed(query: str) -> set[str]:
        html = client.get(f"/admin/scheduler/quota/?{query}").content.decode()
        return set(re.findall(r"quota of (?:user|group) (\w+)", html))

    assert listed("q=bob") == {"bob"}
    assert listed("q=robot") == {"robotics"}
    assert listed("scope=group") == {"robotics"}
    assert listed("scope=user") == {"alice", "bob"}


def test_quota_change_form_shows_current_usage(roles, browser_as, make_job) -> None:
    quota = Quota.objects.create(user=roles.owner, max_gpus=8)
    make_job(roles.owner, JobState.RUNNING, num_gpus=3)
    html = browser_as(roles.staff).get(f"/admin/scheduler/quota/{quota.pk}/change/").content.decode()
    assert "<th>GPUs held / max</th><td>3 / 8</td>" in html


def test_staff_change_a_quota_and_it_applies_at_once(roles, browser_as, api_as) -> None:
    quota = Quota.objects.create(user=roles.owner, max_gpus=8)
    response = browser_as(roles.staff).post(f"/admin/scheduler/quota/{quota.pk}/change/", {
        "user": roles.owner.pk, "group": "", "note": "", "max_gpus": "1", "budget_period_days": "7"})
    assert response.status_code == 302
    refused = api_as(roles.owner).post("/api/v1/jobs/", {"name": "x", "command": "y", "num_gpus": 2}, format="json")
    assert refused.status_code == 403 and refused.json()["limit_value"] == 1


def test_quota_form_refuses_both_or_neither_scope(roles, browser_as) -> None:
    group = Group.objects.create(name="g")
    client = browser_as(roles.staff)
    for scope in ({"user": roles.owner.pk, "group": group.pk}, {"user": "", "group": ""}):
        response = client.post("/admin/scheduler/quota/add/", {**scope, "note": "", "budget_period_days": "7"})
        assert response.status_code == 200 and "quota_exactly_one_scope" in response.content.decode()
    assert not Quota.objects.exists()


def test_staff_see_every_job_and_cancel_from_the_admin(roles, browser_as, make_job) -> None:
    mine = make_job(roles.owner, name="alices-job")
    theirs = make_job(roles.other, JobState.RUNNING, name="bobs-job")
    done = make_job(roles.other, JobState.COMPLETED, name="done-job")
    client = browser_as(roles.staff)
    html = client.get("/admin/scheduler/job/").content.decode()
    assert "alices-job" in html and "bobs-job" in html
    response = client.post("/admin/scheduler/job/", {
        "action": "cancel_jobs", "_selected_action": [mine.pk, theirs.pk, done.pk]}, follow=True)
    assert "2 job(s) cancelled or cancelling; 1 had already finished." in response.content.decode()
    states = dict(Job.objects.values_list("name", "state"))
    assert states == {"alices-job": "CANCELLED", "bobs-job": "CANCELLING", "done-job": "COMPLETED"}


def test_the_job_list_filters_by_any_pending_reason_and_by_submission_date(roles, browser_as, make_job) -> None:
    """The filters offer what the code knows (a reason no job has yet, too) without reading every row."""
    from datetime import timedelta

    from django.utils import timezone

    make_job(roles.owner, name="waits-for-gpus", pending_reason="Resources")
    make_job(roles.owner, name="waits-on-array", pending_reason="JobArrayTaskLimit")
    old = make_job(roles.other, JobState.COMPLETED, name="last-month")
    Job.objects.filter(pk=old.pk).update(submitted_at=timezone.now() - timedelta(days=40))
    client = browser_as(roles.staff)

    def listed(query: str) -> set[str]:
        html = client.get(f"/admin/scheduler/job/?{query}").content.decode()
        return {name for name in ("waits-for-gpus", "waits-on-array", "last-month") if name in html}

    page = client.get("/admin/scheduler/job/").content.decode()
    assert "?pending_reason__exact=Dependency" in page and "?pending_reason__exact=Reservation" in page
    assert listed("pending_reason__exact=JobArrayTaskLimit") == {"waits-on-array"}
    assert listed("pending_reason__exact=Dependency") == set()
    past_week = re.search(r'href="\?([^"]*submitted_at__gte[^"]*)"[^>]*>Past 7 days<', page).group(1)
    assert listed(past_week.replace("&amp;", "&")) == {"waits-for-gpus", "waits-on-array"}
    assert listed("") == {"waits-for-gpus", "waits-on-array", "last-month"}


def test_a_job_id_in_the_search_finds_that_job_or_array_task_and_other_text_the_names(roles, browser_as,
                                                                                         make_job) -> None:
    """As squeue -j: ``ID`` is the job and the tasks of the array it heads, ``ID_INDEX`` one task; a number
    is not looked for in names or commands, any other text is."""
    head = make_job(roles.owner, name="sweep-head")
    Job.objects.filter(pk=head.pk).update(array_id=head.pk, array_index=0)
    task = make_job(roles.other, name="sweep-task", array_id=head.pk, array_index=1)
    alone = make_job(roles.other, name="alone-job")
    decoy = make_job(roles.other, name=f"decoy-{head.pk}", command=f"python train.py --seed {head.pk}_1")
    client = browser_as(roles.staff)
    names = ("sweep-head", "sweep-task", "alone-job", "decoy-")

    def found(term: str) -> set[str]:
        html = client.get("/admin/scheduler/job/", {"q": term}).content.decode()
        return {name for name in names if f">{name}" in html}

    assert found(str(head.pk)) == {"sweep-head", "sweep-task"}
    assert found(f" {head.pk}_1 ") == {"sweep-task"}
    assert found(str(alone.pk)) == {"alone-job"}
    assert found(f"{head.pk}_7") == set() and found("999999999") == set()
    assert found("decoy") == {"decoy-"} and found("sweep") == {"sweep-head", "sweep-task"}
    assert found(f"--seed {head.pk}") == {"decoy-"} and decoy.pk
    assert "as squeue -j" in client.get("/admin/scheduler/job/").content.decode()


def test_jobs_are_read_only_in_the_admin(roles, browser_as, make_job) -> None:
    job = make_job(roles.owner)
    client = browser_as(roles.staff)
    client.post(f"/admin/scheduler/job/{job.pk}/change/", {"state": "COMPLETED", "name": "renamed"})
    job.refresh_from_db()
    assert (job.state, job.name) == (JobState.PENDING, "job")
    assert client.get("/admin/scheduler/job/add/").status_code == 403


def test_staff_hold_and_release_jobs_from_the_admin(roles, browser_as, make_job) -> None:
    theirs = make_job(roles.owner, name="alices-job")
    mine = make_job(roles.staff, name="staff-job")
    running = make_job(roles.other, JobState.RUNNING, name="bobs-job")
    client = browser_as(roles.staff)
    response = client.post("/admin/scheduler/job/", {
        "action": "hold_jobs", "_selected_action": [theirs.pk, mine.pk, running.pk]}, follow=True)
    assert "2 job(s) held; 1 could not be (not pending, or ended)." in response.content.decode()
    assert dict(Job.objects.values_list("name", "hold")) == {"alices-job": "admin", "staff-job": "user", "bobs-job": ""}
    response = client.post("/admin/scheduler/job/", {"action": "release_jobs", "_selected_action": [theirs.pk]},
                           follow=True)
    assert "1 job(s) released; 0 could not be" in response.content.decode()
    assert Job.objects.get(pk=theirs.pk).hold == ""


def test_the_te_run_time_limit_is_typed_and_shown_as_a_duration(roles, browser_as) -> None:
    client = browser_as(roles.staff)
    response = client.post("/admin/scheduler/quota/add/", {
        "user": roles.owner.pk, "group": "", "note": "", "budget_period_days": "7", "max_te_runtime": "1h30m"})
    assert response.status_code == 302
    quota = Quota.objects.get()
    assert quota.max_te_runtime == 5400
    change = client.get(f"/admin/scheduler/quota/{quota.pk}/change/").content.decode()
    assert re.search(r'name="max_te_runtime" value="1:30:00"', change)
    listed = client.get("/admin/scheduler/quota/").content.decode()
    assert 'class="field-te_run_time">1:30:00<' in listed
    bad = client.post(f"/admin/scheduler/quota/{quota.pk}/change/", {
        "user": roles.owner.pk, "group": "", "note": "", "budget_period_days": "7", "max_te_runtime": "soon"})
    assert bad.status_code == 200 and "soon" in bad.content.decode()
    assert Quota.objects.get().max_te_runtime == 5400  # nothing written
    cleared = client.post(f"/admin/scheduler/quota/{quota.pk}/change/", {
        "user": roles.owner.pk, "group": "", "note": "", "budget_period_days": "7", "max_te_runtime": ""})
    assert cleared.status_code == 302 and Quota.objects.get().max_te_runtime is None
