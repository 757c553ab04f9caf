"""GPU telemetry on the job page, in a real browser: a job that never ran says so and draws no empty chart
frames; a job whose GPUs reported draws one chart per series."""

from __future__ import annotations

import time

import pytest

from tests.browser.conftest import UI_WAIT_MS

pytestmark = [pytest.mark.browser, pytest.mark.postgres, pytest.mark.redis]

SERIES = ("util", "fb_used", "temp", "power")


@pytest.fixture
def telemetry_store(e2e_redis_url, settings):  # noqa: ANN001, ANN201
    """This process writes telemetry where the portal under test reads it."""
    from gputelemetry import services

    settings.REDIS_URL = e2e_redis_url
    services._client = None  # noqa: SLF001 - the client is made from the setting on first use
    yield
    services._client = None  # noqa: SLF001


def test_a_job_that_never_ran_has_no_chart_frames_and_a_reporting_one_has_four(
        browser_page, user_factory, telemetry_store, screens) -> None:  # noqa: ANN001
    from django.utils import timezone

    from cluster.models import Node
    from cluster.telemetry_schema import check_report
    from gputelemetry import services
    from scheduler.models import Attempt, AttemptState, Job, JobState

    owner = user_factory("tess")
    never = Job.objects.create(owner=owner, name="never-ran", command="true", num_gpus=1, state=JobState.CANCELLED,
                               ended_at=timezone.now())
    Node.objects.create(name="tel-1", gpus=1, last_heartbeat=timezone.now())
    ran = Job.objects.create(owner=owner, name="reported", command="true", num_gpus=1, state=JobState.RUNNING,
                             attempt_count=1, first_started_at=timezone.now())
    Attempt.objects.create(job=ran, number=1, gpu_allocation={"tel-1": [0]}, state=AttemptState.RUNNING,
                           started_at=timezone.now())
    services.ingest("tel-1", check_report(time.time(), [{"i": 0, "uuid": "GPU-t", "util": 61, "temp": 55}],
                                          [{"job_id": ran.pk, "attempt": 1, "gpus": [0], "proc_mem": 100}]))
    page = browser_page(owner)

    page.goto(f"/jobs/{never.pk}/")
    page.wait_for_load_state("networkidle")
    assert page.is_visible("#job-telemetry .telemetry-empty")
    assert page.locator("#job-telemetry .telemetry-chart").count() == 0
    screens.shot(page, "never-ran")

    page.goto(f"/jobs/{ran.pk}/")
    for name in SERIES:
        page.wait_for_selector(f"#job-telemetry-{name} .main-svg", timeout=UI_WAIT_MS)
    assert page.locator("#job-telemetry .telemetry-chart:visible").count() == len(SERIES)
    assert not page.is_visible("#job-telemetry .telemetry-empty")
    screens.shot(page, "reported")
