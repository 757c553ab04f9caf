"""Job progress in a real browser: a job reporting through gpusched.job shows a bar, an ETA and live charts,
and the API returns the same; another user cannot read it."""

from __future__ import annotations

import re

import pytest

from tests.browser.conftest import UI_WAIT_MS, assert_not_reloaded, no_reload_marker, wait_for_db
from tests.support.livestack import train_command

pytestmark = [pytest.mark.browser, pytest.mark.postgres, pytest.mark.redis]


def test_a_reporting_job_shows_progress_bar_eta_and_charts_live(live, browser_page, user_factory, screens):
    from jobprogress.models import AttemptProgress
    from scheduler.models import Job

    node = live.start_agent("prog", 1)
    live.wait_nodes_up(node)
    owner = user_factory("paula")
    page = browser_page(owner)
    page.goto("/jobs/new/")
    page.fill("#id_name", "reporting")
    page.fill("#id_command", train_command(TRAIN_STEPS=100000, TRAIN_SLEEP=0.1, TRAIN_EVAL_EVERY=20))
    page.fill("#id_num_gpus", "1")
    page.fill("#id_grace_period", "3s")  # durations as the command line takes them
    page.fill("#id_time_limit", "1h30m")
    page.click("main button[type=submit]")
    page.wait_for_url(re.compile(r".*/jobs/\d+/$"))
    job_id = int(page.url.rstrip("/").rsplit("/", 1)[1])
    assert Job.objects.values_list("grace_period", "time_limit").get(pk=job_id) == (3, 5400)
    no_reload_marker(page)
    page.wait_for_selector("#live-status[data-state=live]")

    # Reports arrive over the socket: the bar moves, the ETA appears, one chart per metric.
    page.wait_for_selector("#progress-section:not([hidden])", timeout=UI_WAIT_MS)
    page.wait_for_function("document.getElementById('job-progress').value > 0", timeout=UI_WAIT_MS)
    page.wait_for_function("/ETA /.test(document.getElementById('progress-eta').textContent)", timeout=UI_WAIT_MS)
    page.wait_for_selector('#progress-charts [data-metric="loss"] .main-svg', timeout=UI_WAIT_MS)
    page.wait_for_selector('#progress-charts [data-metric="val_acc"] .main-svg', timeout=UI_WAIT_MS)
    first = int(re.search(r"step (\d+) of 100000", page.text_content("#progress-text")).group(1))
    page.wait_for_function(f"/step (\\d+)/.exec(document.getElementById('progress-text').textContent)[1] > {first}",
                           timeout=UI_WAIT_MS)
    assert page.locator('#progress-metrics dd[data-metric="loss"]').count() == 1
    screens.shot(page, "progress")
    assert_not_reloaded(page)

    # The API returns the same progress to its owner, and a 404 to another user.
    stored = wait_for_db(lambda: AttemptProgress.objects.filter(job_id=job_id).first(), "progress to be stored")
    body = page.evaluate(f"fetch('/api/v1/jobs/{job_id}/progress/').then((r) => r.json())")
    assert body["job"] == job_id and body["progress"]["total_steps"] == 100000
    assert body["progress"]["step"] >= stored.step and set(body["progress"]["metrics"]) >= {"loss", "batch_acc"}
    other = browser_page(user_factory("oscar"))
    assert other.evaluate(f"fetch('/api/v1/jobs/{job_id}/progress/').then((r) => r.status)") == 404
    assert other.evaluate(f"fetch('/jobs/{job_id}/').then((r) => r.status)") == 404

    page.on("dialog", lambda dialog: dialog.accept())
    page.click("main form button.danger")
    page.wait_for_function("document.getElementById('job-state').textContent === 'CANCELLED'", timeout=UI_WAIT_MS)
    assert Job.objects.get(pk=job_id).state == "CANCELLED"
