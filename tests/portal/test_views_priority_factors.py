"""A pending job's priority factors (class, fair share, priority, age) in the API and on its page."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from scheduler.models import Job, JobState

pytestmark = pytest.mark.django_db


def test_factors_of_a_pending_job_in_the_api_and_none_once_it_runs(roles, api_as, make_job):
    job = make_job(roles.owner, JobState.PENDING, job_class="TE", priority=7)
    body = api_as(roles.owner).get(f"/api/v1/jobs/{job.pk}/").json()
    factors = body["priority_factors"]
    assert (factors["class"], factors["class_first"], factors["fair_share"], factors["priority"]) == ("TE", True, None, 7)
    assert factors["waiting_since"] == body["submitted_at"]  # the age counts from here; a later read answers the same
    running = make_job(roles.owner, JobState.RUNNING)
    assert api_as(roles.owner).get(f"/api/v1/jobs/{running.pk}/").json()["priority_factors"] is None


def test_factors_on_the_job_page_and_not_for_others(roles, browser_as, make_job):
    job = make_job(roles.owner, JobState.PENDING, job_class="BE", priority=-3)
    page = browser_as(roles.owner).get(f"/jobs/{job.pk}/").content.decode()
    assert 'id="priority-factors"' in page and "priority -3" in page and "fair share off" in page
    Job.objects.filter(pk=job.pk).update(submitted_at=timezone.now() - timedelta(minutes=90))
    page = browser_as(roles.owner).get(f"/jobs/{job.pk}/").content.decode()
    assert re.search(r"priority -3; waiting 1:30:0\d \(540\d s\)</dd>", page)
    assert browser_as(roles.other).get(f"/jobs/{job.pk}/").status_code == 404

