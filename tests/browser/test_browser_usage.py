"""The usage page in a real browser: the stacked area is drawn by the locally served Plotly, one
trace per project the user may see, and nothing is fetched from elsewhere."""

from __future__ import annotations

from datetime import timedelta

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.postgres, pytest.mark.redis]


def test_the_usage_page_draws_a_stacked_area_per_visible_project(browser_page, user_factory, screens):
    from django.utils import timezone

    from scheduler.models import Attempt, AttemptState, Job, JobState
    from scheduler.projects import Membership, Project

    ada, ben = user_factory("ada"), user_factory("ben")
    end = timezone.now() - timedelta(hours=2)
    for name, owner, gpus in (("vision", ada, 2), ("speech", ada, 1), ("hidden", ben, 4)):
        project = Project.objects.create(name=name)
        Membership.objects.create(project=project, user=owner)
        job = Job.objects.create(owner=owner, project=project, name="j", command="x", num_gpus=gpus,
                                 state=JobState.COMPLETED, submitted_at=end - timedelta(hours=3))
        Attempt.objects.create(job=job, number=1, gpu_allocation={"n1": list(range(gpus))},
                               state=AttemptState.COMPLETED, started_at=end - timedelta(hours=3), ended_at=end)
    page = browser_page(ada, width=1400, height=900)
    requests: list[str] = []
    errors: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto("/usage/?by=project")
    page.wait_for_selector("#usage-area .main-svg")
    screens.shot(page, "usage-by-project")
    traces = page.evaluate("document.getElementById('usage-area').data.map((t) => [t.name, t.stackgroup])")
    assert sorted(traces) == [["speech", "usage"], ["vision", "usage"]]
    rows = page.locator("#usage-table tbody tr").all_inner_texts()
    assert [r.split("\t")[0] for r in rows] == ["speech", "vision"]
    origin = page.url.split("/usage/")[0]
    assert [u for u in requests if not u.startswith(origin)] == []
    assert errors == []
