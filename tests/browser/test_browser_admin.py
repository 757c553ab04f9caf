"""The admin's job list in a real browser: every column visible at 1400 px, and no request for a missing icon."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.postgres, pytest.mark.redis]

LONG_NAME = "resnet152-imagenet-lr-sweep-with-a-rather-descriptive-name-0042"


def test_the_admin_job_list_shows_every_column_at_1400_px(browser_page, user_factory, screens):
    from scheduler.models import Job, JobEvent, JobState

    admin = user_factory("ada", staff=True)
    job = Job.objects.create(owner=admin, name=LONG_NAME, command="python train.py", num_gpus=8,
                             state=JobState.PENDING, pending_reason="WaitingForPreemption")
    JobEvent.objects.create(job=job, to_state=JobState.PENDING, reason="Submitted")
    page = browser_page(admin, width=1400, height=900)
    missing: list[str] = []
    page.on("response", lambda r: missing.append(r.url) if r.status == 404 else None)
    page.goto("/admin/scheduler/job/")
    page.wait_for_selector("#result_list")
    screens.shot(page, "admin-job-list-1400")
    # The list scrolls inside its own box (.results, overflow-x: auto): a column past that box's edge is cut.
    cut = page.evaluate("""() => {
        const box = document.querySelector('#changelist .results').getBoundingClientRect();
        const right = Math.min(box.right, document.documentElement.clientWidth);
        return [...document.querySelectorAll('#result_list th')]
            .filter((cell) => cell.getBoundingClientRect().right > right + 0.5)
            .map((cell) => cell.textContent.trim());
    }""")
    assert cut == [], f"columns past the right edge at 1400 px: {cut}"
    assert page.evaluate("document.documentElement.scrollWidth <= document.documentElement.clientWidth")
    page.goto("/jobs/")
    page.wait_for_load_state("networkidle")
    assert missing == [], f"404 responses: {missing}"
