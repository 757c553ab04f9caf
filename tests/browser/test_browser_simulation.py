"""The simulation page in a real browser: a refused upload, a run with its progress, charts and downloads."""

from __future__ import annotations

import json
import re

import pytest

from tests.browser.conftest import UI_WAIT_MS, assert_not_reloaded, no_reload_marker

pytestmark = [pytest.mark.browser, pytest.mark.postgres, pytest.mark.redis]


def test_a_bad_trace_is_refused_with_the_line_that_is_wrong(web, browser_page, user_factory, screens, tmp_path):
    trace = tmp_path / "week.csv"
    trace.write_text("job_id,submit_time,duration,num_gpus,job_class\nj1,0,60,1,TE\nj2,10,sixty,2,BE\n")
    page = browser_page(user_factory("erin"))
    page.goto("/simulations/")
    page.check('input[name="workload"][value="trace"]')
    assert page.is_hidden("#id_jobs") and page.is_visible("#id_trace")
    page.set_input_files("#id_trace", str(trace))
    page.click("main button[type=submit]")
    error = page.wait_for_selector("#id_trace_error")
    assert error.text_content().strip() == "Line 3, column 'duration': bad number 'sixty'. The line: \"j2,10,sixty,2,BE\""
    assert page.is_visible("#id_trace")  # the trace fields stay shown for a second try
    screens.shot(page, "refused-upload")


def test_a_synthetic_run_shows_progress_then_charts_and_downloads(live, browser_page, user_factory, screens, tmp_path):
    page = browser_page(user_factory("frank"))
    page.goto("/simulations/")
    page.fill("#id_jobs", "300")
    page.fill("#id_nodes", "4")
    page.fill("#id_gpus_per_node", "8")
    screens.shot(page, "form")
    page.click("main button[type=submit]")
    page.wait_for_url(re.compile(r".*/simulations/\d+/$"))
    no_reload_marker(page)
    page.wait_for_selector("#results:not([hidden])", timeout=3 * UI_WAIT_MS)
    assert page.text_content("#run-state") == "SUCCEEDED"
    assert page.locator(".messages li.run-queued").count() == 0  # "queued." no longer sits beside SUCCEEDED
    rows = page.locator("#summary-rows tr")
    assert [rows.nth(i).locator("th").text_content() for i in range(rows.count())] == [
        "fifo (baseline)", "fitgpp", "te-priority"]
    page.wait_for_selector("#figure .main-svg")
    screens.shot(page, "results")
    assert_not_reloaded(page)

    with page.expect_download() as download:
        page.click("#download-json")
    results = json.loads(download.value.path().read_text())
    assert [r["policy"] for r in results] == ["fifo", "fitgpp", "te-priority"]
    assert all(r["jobs"] == 300 for r in results)

    with page.expect_download() as download:
        page.click("#download-html")
    report = tmp_path / "report.html"
    download.value.save_as(report)

    # The report opens with no network at all: plotly.js is inside it.
    offline = page.context.browser.new_context(viewport={"width": 1280, "height": 900}, offline=True)
    try:
        view = offline.new_page()
        view.goto(report.as_uri())
        view.wait_for_selector("#figure .main-svg")
        assert "fitgpp" in view.text_content("table")
        screens.shot(view, "offline-report")
    finally:
        offline.close()


def test_latency_page_draws_its_charts_and_switches_windows_live(web, browser_page, user_factory, screens):
    page = browser_page(user_factory("gina"))
    page.goto("/latency/?window=3600")
    page.wait_for_selector("#live-status[data-state=live]")
    page.wait_for_selector("#wait-cdf .main-svg")
    page.wait_for_selector("#slowdown-cdf .main-svg")
    no_reload_marker(page)
    page.select_option("#window", "900")
    page.wait_for_function("new URL(location.href).searchParams.get('window') === '900'")
    assert page.locator("#latency-rows tr").count() == 2
    screens.shot(page, "latency")
    assert_not_reloaded(page)
