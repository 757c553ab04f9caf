"""The live pages in a real browser against the real system (daphne, Redis, Celery, agents).

Everything a page shows after it has loaded must arrive over its WebSocket:
each test marks the window once and checks at the end that the page was never
loaded again.
"""

from __future__ import annotations

import re

import pytest

from tests.browser.conftest import UI_WAIT_MS, assert_not_reloaded, no_reload_marker, wait_for_db
from tests.support.livestack import train_command

pytestmark = [pytest.mark.browser, pytest.mark.postgres, pytest.mark.redis]


def gpu_cell(job_id: int) -> str:
    return f'#grid .gpu[data-job-id="{job_id}"]'


def test_submit_watch_on_the_grid_see_the_log_and_cancel(live, browser_page, user_factory, screens):
    from scheduler.models import Job, JobState

    node = live.start_agent("web", 2)
    live.wait_nodes_up(node)
    alice = user_factory("alice")

    cluster = browser_page(alice)
    cluster.goto("/cluster/")
    cluster.wait_for_selector("#live-status[data-state=live]")
    cluster.wait_for_selector(f'#grid .node[data-node="{node.name}"]')
    no_reload_marker(cluster)
    screens.shot(cluster, "cluster-idle")

    form = cluster.context.new_page()
    form.goto("/jobs/new/")
    form.fill("#id_name", "browser-te")
    form.fill("#id_command", train_command(TRAIN_STEPS=100000, TRAIN_SLEEP=0.2))
    form.select_option("#id_job_class", "TE")
    form.fill("#id_num_gpus", "1")
    form.fill("#id_grace_period", "3")
    screens.shot(form, "submit-form")
    form.click("main button[type=submit]")
    form.wait_for_url(re.compile(r".*/jobs/\d+/$"))
    job_id = int(form.url.rstrip("/").rsplit("/", 1)[1])
    assert Job.objects.get(pk=job_id).owner == alice

    # The job appears on the cluster grid without a reload, as a TE job of the viewer's own.
    cell = cluster.locator(gpu_cell(job_id))
    cell.wait_for()
    assert cell.get_attribute("data-status") == "TE"
    assert "mine" in cell.get_attribute("class")
    cell.hover()
    assert f"job {job_id} browser-te (alice, TE" in cluster.text_content("#gpu-detail")
    # Its running time is counted by the page from its start (a push sends only what changed).
    cluster.wait_for_function("/, RUNNING for \\d+(\\.\\d)? s\\)$/.test(document.getElementById('gpu-detail').textContent)",
                              timeout=UI_WAIT_MS)
    screens.shot(cluster, "cluster-running")
    assert_not_reloaded(cluster)

    # Its log streams into the job page.
    no_reload_marker(form)
    form.wait_for_selector("#live-status[data-state=live]")
    form.wait_for_function("document.getElementById('log') && /step 3\\//.test(document.getElementById('log').textContent)",
                           timeout=UI_WAIT_MS)
    assert form.text_content("#job-state") == "RUNNING"
    screens.shot(form, "job-log")

    # Cancel from the page; the new state arrives over the socket.
    form.on("dialog", lambda dialog: dialog.accept())
    form.click("main form button.danger")
    form.wait_for_function("document.getElementById('job-state').textContent === 'CANCELLED'", timeout=UI_WAIT_MS)
    timeline = form.text_content("#timeline")
    assert "CANCELLING" in timeline and "CANCELLED" in timeline
    # The job's last lines are flushed by its agent after it exits and pushed
    # after the state: wait for them rather than read the log at once.
    form.wait_for_function("/checkpoint saved at step/.test(document.getElementById('log').textContent)",
                           timeout=UI_WAIT_MS)
    assert form.is_hidden("main form button.danger")
    screens.shot(form, "job-cancelled")
    assert_not_reloaded(form)

    # The grid lets the GPU go, still without a reload.
    cluster.wait_for_selector(gpu_cell(job_id), state="detached")
    assert cluster.locator('#grid .gpu[data-status="free"]').count() == 2
    screens.shot(cluster, "cluster-after-cancel")
    assert_not_reloaded(cluster)
    assert wait_for_db(lambda: Job.objects.filter(pk=job_id, state=JobState.CANCELLED).exists(), "the cancel")


def test_other_users_see_the_job_on_the_grid_without_command_or_link(live, browser_page, user_factory, screens):
    from scheduler.models import Job, JobState
    from tests.support.live_helpers import submit

    node = live.start_agent("share", 1)
    live.wait_nodes_up(node)
    alice, bob = user_factory("alice"), user_factory("bob")
    job = submit(alice, "alices-secret-run", command=train_command(TRAIN_STEPS=100000, TRAIN_SLEEP=0.2) + " #alice-only")
    wait_for_db(lambda: Job.objects.filter(pk=job.pk, state=JobState.RUNNING).exists(), "the job to run")

    page = browser_page(bob)
    page.goto("/cluster/")
    cell = page.locator(gpu_cell(job.pk))
    cell.wait_for()
    assert cell.evaluate("e => e.tagName") == "SPAN"  # no link to someone else's job
    cell.hover()
    assert "alices-secret-run (alice, BE" in page.text_content("#gpu-detail")
    assert "alice-only" not in page.content()
    screens.shot(page, "cluster-as-bob")
    assert page.goto(f"/jobs/{job.pk}/").status == 404


def test_a_dropped_connection_is_reestablished_and_the_page_catches_up(web, browser_page, user_factory, screens):
    """The server goes away (a deploy, a crash): the page says so, reconnects by itself and
    then shows a change made while it was away and one made after, without a reload."""
    from cluster.models import Node

    page = browser_page(user_factory("carol"))
    page.goto("/cluster/")
    page.wait_for_selector("#live-status[data-state=live]")
    no_reload_marker(page)

    web.stop()
    page.wait_for_selector("#live-status[data-state=reconnecting]")
    screens.shot(page, "reconnecting")
    Node.objects.create(name="while-away", gpus=2)  # committed while no socket is open
    web.start()
    page.wait_for_selector("#live-status[data-state=live]")
    page.wait_for_selector('#grid .node[data-node="while-away"]')
    Node.objects.create(name="after-return", gpus=1)  # published to the new connection
    page.wait_for_selector('#grid .node[data-node="after-return"]')
    screens.shot(page, "reconnected")
    assert_not_reloaded(page)


def test_a_quiet_page_keeps_its_connection_and_still_gets_the_next_push(web, browser_page, user_factory):
    """Nothing is pushed for longer than the channel layer's blocking read (5 s): the one
    websocket stays open (a socket timeout as short as that read ended it every 5 s), and a
    change after the quiet spell arrives on it."""
    from cluster.models import Node

    page = browser_page(user_factory("quinn"))
    opened, closed = [], []
    page.on("websocket", lambda ws: (opened.append(ws.url), ws.on("close", lambda _ws: closed.append(ws.url))))
    page.goto("/cluster/")
    page.wait_for_selector("#live-status[data-state=live]")
    page.wait_for_timeout(8000)
    Node.objects.create(name="after-quiet", gpus=2)
    page.wait_for_selector('#grid .node[data-node="after-quiet"]')
    assert closed == [] and len(opened) == 1, (opened, closed)


def test_a_push_keeps_the_focused_gpu_cell_and_its_detail(web, browser_page, user_factory, make_cluster_rows):
    """Cells are updated in place: keyboard focus and the detail line survive a refresh."""
    from cluster.models import Node

    make_cluster_rows()
    page = browser_page(user_factory("hana"))
    page.goto("/cluster/")
    page.wait_for_selector("#live-status[data-state=live]")
    first = '#grid .node[data-node="phone-a"] .gpu[data-index="3"]'
    page.focus(first)
    page.evaluate(f"document.querySelector('{first}').dataset.marked = 'yes'")
    assert "phone-a GPU 3" in page.text_content("#gpu-detail")
    Node.objects.create(name="phone-c", gpus=1)
    page.wait_for_selector('#grid .node[data-node="phone-c"]')
    assert page.evaluate(f"document.activeElement === document.querySelector('{first}')")
    assert page.get_attribute(first, "data-marked") == "yes"
    assert "phone-a GPU 3" in page.text_content("#gpu-detail")


def test_pages_fit_a_phone_screen(web, browser_page, user_factory, screens, make_cluster_rows):
    make_cluster_rows()
    page = browser_page(user_factory("dave"), width=390, height=844, is_mobile=True, has_touch=True)
    for path, ready in (("/cluster/", "#grid .node"), ("/latency/", "#wait-cdf .main-svg"),
                        ("/simulations/", "#sim-form"), ("/jobs/new/", "#id_name")):
        page.goto(path)
        page.wait_for_selector(ready)
        overflow = page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth")
        assert overflow <= 0, f"{path} is {overflow}px wider than the phone's screen"
        screens.shot(page, "phone-" + path.strip("/").replace("/", "-"))


@pytest.fixture
def make_cluster_rows(transactional_db):  # noqa: ANN001
    """Nodes with GPUs (no agent needed for pages that only read them)."""

    def make() -> None:
        from cluster.models import Gpu, Node

        for name, gpus in (("phone-a", 8), ("phone-b", 8)):
            node = Node.objects.create(name=name, gpus=gpus)
            Gpu.objects.bulk_create(Gpu(node=node, index=i) for i in range(gpus))

    return make


def resumed_job(owner, name: str, first_log: str, second_log: str, **first_fields):  # noqa: ANN001, ANN201
    """A running job preempted once: (job, its ended first attempt, its running second one), each
    attempt with one stored log batch; ``first_fields`` add to the first attempt's columns."""
    from django.utils import timezone

    from scheduler.models import Attempt, AttemptLog, AttemptState, Job, JobEvent, JobState

    now = timezone.now()
    job = Job.objects.create(owner=owner, name=name, command="python train.py", num_gpus=1,
                             state=JobState.RUNNING, attempt_count=2, preemption_count=1, first_started_at=now)
    JobEvent.objects.create(job=job, to_state=JobState.PENDING, reason="Submitted")
    first = Attempt.objects.create(job=job, number=1, gpu_allocation={"n1": [0]}, state=AttemptState.PREEMPTED,
                                   ended_at=now, **first_fields)
    AttemptLog.objects.create(attempt=first, text=first_log)
    second = Attempt.objects.create(job=job, number=2, gpu_allocation={"n1": [1]}, state=AttemptState.RUNNING)
    AttemptLog.objects.create(attempt=second, text=second_log)
    return job, first, second


def test_every_attempts_log_is_kept_and_the_live_one_keeps_streaming(web, browser_page, user_factory, screens):
    """A job preempted once: its first attempt's log opens from the API, the second streams live."""
    from django.utils import timezone

    from scheduler.models import AttemptLog

    ivan = user_factory("ivan")
    now = timezone.now()
    job, first, second = resumed_job(ivan, "resumed", "step 1/9\nstep 2/9\ncheckpoint saved at step 2",
                                     "resumed from checkpoint at step 2\nstep 3/9",
                                     notice_at=now, vacated_at=now, checkpointed=True, lost_gpu_seconds=0.0)

    page = browser_page(ivan)
    page.goto(f"/jobs/{job.pk}/")
    no_reload_marker(page)
    page.wait_for_function("/step 3\\/9/.test(document.getElementById('log').textContent)")
    assert page.text_content("#log-heading") == "Log of attempt 2"
    page.click('#log-tabs button[data-attempt="1"]')
    page.wait_for_function("/checkpoint saved at step 2/.test(document.getElementById('log').textContent)")
    assert "resumed from" not in page.text_content("#log")
    screens.shot(page, "first-attempt-log")

    AttemptLog.objects.create(attempt=second, text="step 4/9")  # arrives while attempt 1 is shown
    page.click('#log-tabs button[data-attempt="2"]')
    page.wait_for_function("/step 4\\/9/.test(document.getElementById('log').textContent)")
    log = page.text_content("#log")
    assert log.index("resumed from checkpoint") < log.index("step 3/9") < log.index("step 4/9")
    assert "checkpoint saved at step 2" not in log
    AttemptLog.objects.create(attempt=second, text="step 5/9")
    page.wait_for_function("/step 5\\/9/.test(document.getElementById('log').textContent)")
    assert page.text_content("#log").count("step 4/9") == 1
    rows = page.locator("table.attempts tbody tr")
    assert rows.count() == 2 and "PREEMPTED" in rows.nth(0).text_content() and "yes" in rows.nth(0).text_content()
    screens.shot(page, "live-attempt-log")
    assert_not_reloaded(page)


def test_the_first_log_lines_create_the_log_section_of_a_page_opened_while_the_job_waited(
        web, browser_page, user_factory):
    """A page opened before the first attempt has no log section; that attempt's first lines may
    arrive before the job's new state does, and then make the section, its heading and its tabs."""
    from scheduler.models import Attempt, AttemptLog, AttemptState, Job, JobEvent, JobState

    judy = user_factory("judy")
    job = Job.objects.create(owner=judy, name="first-lines", command="python train.py", num_gpus=1)
    JobEvent.objects.create(job=job, to_state=JobState.PENDING, reason="Submitted")
    page = browser_page(judy)
    page.goto(f"/jobs/{job.pk}/")
    assert page.query_selector("#log") is None
    no_reload_marker(page)
    attempt = Attempt.objects.create(job=job, number=1, gpu_allocation={"n1": [0]}, state=AttemptState.RUNNING)
    AttemptLog.objects.create(attempt=attempt, text="step 1/9")  # no job event: only the log is pushed
    page.wait_for_function("/step 1\\/9/.test((document.getElementById('log') || {}).textContent || '')")
    assert page.text_content("#log-heading") == "Log of attempt 1"
    assert_not_reloaded(page)


def test_a_long_log_keeps_only_its_newest_lines_on_the_page(web, browser_page, user_factory):
    """A job that prints without end must not fill the browser: the live attempt keeps its newest lines
    and marks the cut; a finished attempt's tab loads only its last lines."""
    from scheduler.models import AttemptLog

    kim = user_factory("kim")
    job, first, second = resumed_job(kim, "chatty", "\n".join(f"old {n}" for n in range(5000)), "new start")

    page = browser_page(kim)
    page.goto(f"/jobs/{job.pk}/")
    page.wait_for_function("/new start/.test(document.getElementById('log').textContent)")
    for batch in range(5):
        AttemptLog.objects.create(attempt=second, text="\n".join(f"new {n}" for n in range(batch * 1000, (batch + 1) * 1000)))
        last = (batch + 1) * 1000 - 1
        page.wait_for_function(f"/new {last}\\n/.test(document.getElementById('log').textContent)")
    log = page.text_content("#log")
    assert "earlier lines left out" in log and "new start" not in log
    assert log.count("\n") <= 4001 and log.rstrip().endswith("new 4999")

    page.click('#log-tabs button[data-attempt="1"]')
    page.wait_for_function("/old 4999/.test(document.getElementById('log').textContent)")
    log = page.text_content("#log")
    assert "earlier lines left out" in log and "old 2999" not in log and "old 3000\n" in log
