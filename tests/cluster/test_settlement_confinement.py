"""Exit outcomes from the node's confinement (cluster.settlement, cluster.reports, cluster.tasks): OUT_OF_MEMORY fails
the job and is shown as such; peak memory, CPU time and the node's message are stored per attempt."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from cluster import protocol, reports, tasks
from portal.cli.commands import format_job
from scheduler.models import Attempt, AttemptState, JobEvent, JobState
from tests.support.live_helpers import make_node
from tests.support.placed_jobs import owner, placed_job  # noqa: F401 - owner is a fixture

pytestmark = pytest.mark.django_db


def _exit(job: Any, node: str, **kw: Any) -> str | None:
    now = timezone.now()
    values = {"exit_code": None, "signal": 9, "ended_at": now, "notice_at": None, "checkpointed": False,
              "reason": protocol.EXIT_OUT_OF_MEMORY, "now": now, **kw}
    return reports.attempt_exited(node, job.pk, job.attempt_count, **values)


def test_out_of_memory_fails_the_job_with_its_own_outcome_and_measures(owner, sent, no_triggers) -> None:
    make_node("n1", 1)
    job = placed_job(owner, {"n1": [0]})
    assert _exit(job, "n1", peak_mem_bytes=2 * 2**30, cpu_seconds=12.5, message="memory.max 2147483648 reached") \
        == AttemptState.OUT_OF_MEMORY
    job.refresh_from_db()
    attempt = Attempt.objects.get(job=job)
    assert job.state == JobState.FAILED
    assert (attempt.state, attempt.peak_mem_bytes, attempt.cpu_seconds) == (AttemptState.OUT_OF_MEMORY, 2 * 2**30, 12.5)
    assert attempt.message == "n1: memory.max 2147483648 reached"
    event = JobEvent.objects.filter(job=job).latest("id")
    assert event.reason == "OutOfMemory" and "out of memory" in event.message


def test_measures_of_a_multi_node_attempt_take_the_largest_peak_and_the_summed_cpu(owner, sent, no_triggers) -> None:
    make_node("n1", 1), make_node("n2", 1)
    job = placed_job(owner, {"n1": [0], "n2": [0]})
    _exit(job, "n1", reason=None, exit_code=0, signal=None, peak_mem_bytes=100, cpu_seconds=1.0)
    _exit(job, "n2", reason=None, exit_code=0, signal=None, peak_mem_bytes=300, cpu_seconds=2.0)
    attempt = Attempt.objects.get(job=job)
    assert (attempt.state, attempt.peak_mem_bytes, attempt.cpu_seconds) == (AttemptState.COMPLETED, 300, 3.0)


def test_an_exit_without_measures_leaves_them_unknown(owner, sent, no_triggers) -> None:
    make_node("n1", 1)
    job = placed_job(owner, {"n1": [0]})
    _exit(job, "n1", reason=None, exit_code=0, signal=None)
    attempt = Attempt.objects.get(job=job)
    assert (attempt.peak_mem_bytes, attempt.cpu_seconds, attempt.message) == (None, None, "")


@pytest.mark.parametrize("field, value", [("peak_mem_bytes", -1), ("peak_mem_bytes", "1G"), ("peak_mem_bytes", 1.5),
                                          ("cpu_seconds", -0.1), ("cpu_seconds", "x"), ("cpu_seconds", float("nan")),
                                          ("message", 7)])
def test_bad_measures_in_an_exit_report_are_refused_naming_the_field(owner, sent, no_triggers, caplog, field,
                                                                     value) -> None:
    make_node("n1", 1)
    job = placed_job(owner, {"n1": [0]})
    tasks.exited(node="n1", job_id=job.pk, attempt=1, exit_code=0, ended_at=1.0, token="", **{field: value})
    assert f"dropped: {field}:" in caplog.text
    assert Attempt.objects.get(job=job).state == AttemptState.RUNNING


def test_out_of_memory_is_shown_on_the_job_page_in_the_api_and_by_the_cli(owner, sent, no_triggers) -> None:
    from rest_framework.test import APIClient

    make_node("n1", 1)
    job = placed_job(owner, {"n1": [0]})
    _exit(job, "n1", peak_mem_bytes=3 * 2**30, cpu_seconds=4.25)
    page = Client()
    page.force_login(owner)
    html = page.get(f"/jobs/{job.pk}/").content.decode()
    assert "<td>OUT_OF_MEMORY</td>" in html
    assert re.search(r'class="peak-mem">3\.0(\s|&nbsp;)GB<', html) and 'class="cpu-seconds">4.3<' in html
    api = APIClient()
    api.force_authenticate(owner)
    body = api.get(f"/api/v1/jobs/{job.pk}/").json()
    (attempt,) = body["attempts"]
    assert (attempt["outcome"], attempt["peak_mem_bytes"], attempt["cpu_seconds"]) == ("OUT_OF_MEMORY", 3 * 2**30, 4.25)
    shown = format_job(body)
    assert "OUT_OF_MEMORY" in shown and "3.0G" in shown and " 4.3" in shown  # to a tenth, as the page
