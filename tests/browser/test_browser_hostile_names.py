"""Markup in names, in a real browser: job names, pending messages, timeline messages, log lines and
GPU models carrying <img onerror>, <script> and <svg onload> are shown as text on the cluster page
(grid, hover detail, queue, utilization chart), the latency page (tables and Plotly charts, hovered)
and the job page (title, state line, timeline, log), on the first render and after a push; none of
them runs or becomes an element.

Each payload, if it ever ran, would add one to ``window.__xss``; a dialog would fail the test too.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.browser.conftest import assert_not_reloaded, no_reload_marker

pytestmark = [pytest.mark.browser, pytest.mark.postgres, pytest.mark.redis]

RAN = "window.__xss=(window.__xss||0)+1"
IMG = f'<img src=x onerror="{RAN}">'
SCRIPT = f"<script>{RAN}</script>"
SVG = f'"><svg onload="{RAN}">'
PAYLOADS = (IMG, SCRIPT, SVG)

# Elements or attributes that only a payload could have put on these pages.
INJECTED = """() => [
  ...document.querySelectorAll('[onerror], [onload], img[src="x"], svg svg[onload]'),
  ...[...document.querySelectorAll('script')].filter((s) => s.textContent.includes('__xss')
        && s.type !== 'application/json'),
].map((e) => e.outerHTML.slice(0, 120))"""


@pytest.fixture
def hostile_rows(user_factory):  # noqa: ANN001, ANN201
    """A node whose GPU model is markup, a running job (with log and timeline) and a pending and a
    completed job, each named with a payload, all owned by eve."""
    from datetime import timedelta

    from django.utils import timezone

    from cluster.models import Gpu, Node
    from scheduler.models import Attempt, AttemptLog, AttemptState, Job, JobEvent, JobState

    eve = user_factory("eve")
    now = timezone.now()
    node = Node.objects.create(name="n1", gpus=2, last_heartbeat=now)
    Gpu.objects.bulk_create(Gpu(node=node, index=i, model_name=IMG) for i in range(2))
    running = Job.objects.create(owner=eve, name=IMG, command=SCRIPT, num_gpus=1, state=JobState.RUNNING,
                                 attempt_count=1, first_started_at=now - timedelta(seconds=30))
    Gpu.objects.filter(node=node, index=0).update(allocated_to=running)
    attempt = Attempt.objects.create(job=running, number=1, gpu_allocation={"n1": [0]}, state=AttemptState.RUNNING,
                                     started_at=now - timedelta(seconds=30))
    AttemptLog.objects.create(attempt=attempt, text="\n".join(PAYLOADS))
    JobEvent.objects.create(job=running, to_state=JobState.PENDING, reason="Submitted", message=SVG)
    JobEvent.objects.create(job=running, from_state=JobState.PENDING, to_state=JobState.RUNNING, reason="Started",
                            message=SCRIPT)
    pending = Job.objects.create(owner=eve, name=SCRIPT, command="true", num_gpus=2, state=JobState.PENDING,
                                 pending_reason="Resources", pending_message=IMG)
    done = Job.objects.create(owner=eve, name=SVG, command="true", num_gpus=1, state=JobState.COMPLETED,
                              attempt_count=1, first_started_at=now - timedelta(seconds=50), ended_at=now,
                              exit_code=0)
    Attempt.objects.create(job=done, number=1, gpu_allocation={"n1": [1]}, state=AttemptState.COMPLETED,
                           started_at=now - timedelta(seconds=50), ended_at=now, exit_code=0)
    return eve, running, pending, done


def watch(page: Any) -> list[str]:
    """Dialogs the page opens (alert, confirm) are recorded and dismissed."""
    dialogs: list[str] = []

    def record(dialog: Any) -> None:
        dialogs.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", record)
    return dialogs


def assert_inert(page: Any, dialogs: list[str], where: str) -> None:
    assert page.evaluate("window.__xss") is None, f"a payload ran on {where}"
    assert page.evaluate(INJECTED) == [], f"a payload became markup on {where}"
    assert dialogs == [], f"{where} opened dialogs {dialogs}"


def hover_plot(page: Any, selector: str) -> None:
    """Move the pointer across a Plotly chart's plotting area, so its hover labels are drawn."""
    box = page.locator(f"{selector} .nsewdrag").first.bounding_box()
    for i in range(1, 10):
        page.mouse.move(box["x"] + box["width"] * i / 10, box["y"] + box["height"] / 2)


def test_markup_in_names_is_shown_as_text_and_never_runs(web, browser_page, hostile_rows, screens) -> None:
    from portal import realtime
    from scheduler.models import Job, JobState

    eve, running, pending, done = hostile_rows
    page = browser_page(eve)
    dialogs = watch(page)

    # The cluster page: grid, hover detail, queue, utilization chart.
    page.goto("/cluster/")
    page.wait_for_selector("#live-status[data-state=live]")
    no_reload_marker(page)
    cell = page.locator(f'#grid .gpu[data-job-id="{running.pk}"]')
    cell.hover()
    detail = page.text_content("#gpu-detail")
    assert f"job {running.pk} {IMG} (eve, BE" in detail and IMG in detail  # the model and the name, as text
    assert f"#{pending.pk} {SCRIPT}" in page.text_content("#queue-BE")
    assert IMG in page.text_content("#queue-BE")  # the pending message
    hover_plot(page, "#util-chart")
    screens.shot(page, "cluster")
    assert_inert(page, dialogs, "the cluster page")

    # A push brings a new job named with markup; it is rendered by the same code, as text.
    late = Job.objects.create(owner=eve, name=SVG + SCRIPT, command="true", num_gpus=2, state=JobState.PENDING)
    realtime.publish_cluster_changed()
    page.wait_for_selector(f'#queue-BE tr[data-job-id="{late.pk}"]')
    assert SVG + SCRIPT in page.text_content(f'#queue-BE tr[data-job-id="{late.pk}"]')
    assert_inert(page, dialogs, "the cluster page after a push")
    assert_not_reloaded(page)

    # The latency page: its tables and both CDF charts, hovered.
    page.goto("/latency/")
    page.wait_for_selector("#wait-cdf .main-svg")
    hover_plot(page, "#wait-cdf")
    hover_plot(page, "#slowdown-cdf")
    screens.shot(page, "latency")
    assert_inert(page, dialogs, "the latency page")

    # The job page: title, timeline, command, log (streamed over the socket).
    page.goto(f"/jobs/{running.pk}/")
    page.wait_for_selector("#live-status[data-state=live]")
    page.wait_for_function("document.getElementById('log') && document.getElementById('log').textContent.includes('svg')")
    assert IMG in page.text_content("main h1")
    timeline = page.text_content("#timeline")
    assert SVG in timeline and SCRIPT in timeline
    log = page.text_content("#log")
    assert all(payload in log for payload in PAYLOADS)
    assert SCRIPT in page.text_content("main")  # the command
    screens.shot(page, "job")
    assert_inert(page, dialogs, "the job page")

    for job in (pending, done):
        page.goto(f"/jobs/{job.pk}/")
        page.wait_for_selector("#live-status[data-state=live]")
        assert job.name in page.text_content("main h1")
        assert_inert(page, dialogs, f"the page of job {job.pk}")
