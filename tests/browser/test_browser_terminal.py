"""A terminal session in a real browser: started from the form, opened from the job page, a command typed
into xterm.js runs on the node and its output shows; another user gets 404 and no byte, and no websocket;
stopping the session closes the terminal and its URL stops answering."""

from __future__ import annotations

import re

import pytest

from tests.browser.conftest import UI_WAIT_MS, wait_for_db

pytestmark = [pytest.mark.browser, pytest.mark.postgres, pytest.mark.redis]

OPEN_SOCKET = """async (url) => await new Promise((resolve) => {
    const ws = new WebSocket("ws://" + location.host + url);
    ws.onopen = () => resolve("open"); ws.onerror = () => resolve("refused"); })"""


def test_a_terminal_from_the_form_runs_a_command_only_for_its_owner_and_stops(
        live, browser_page, user_factory, screens, jupyter_on_path):  # noqa: ANN001
    from cluster.models import Gpu
    from scheduler.models import Job, JobState

    node = live.start_agent("term", 1)
    live.wait_nodes_up(node)
    alice, bob = user_factory("alice"), user_factory("bob")

    page = browser_page(alice)
    page.goto("/sessions/new/")
    page.select_option("#id_kind", "terminal")
    page.fill("#id_num_gpus", "1")
    page.fill("#id_time_limit", "900")
    page.click("#start-session")
    page.wait_for_url(re.compile(r".*/jobs/\d+/$"))
    job_id = int(page.url.rstrip("/").rsplit("/", 1)[1])
    page.wait_for_selector("#session-open:not([hidden])", timeout=UI_WAIT_MS)
    assert page.get_attribute("#session-open", "href").endswith(f"/sessions/{job_id}/terminal/")

    term = page.context.new_page()
    term.goto(f"/sessions/{job_id}/terminal/")
    term.wait_for_selector("#terminal-status[data-state=live]", timeout=UI_WAIT_MS)
    term.click("#terminal")
    term.keyboard.type("echo gpus=$CUDA_VISIBLE_DEVICES sum=$((6*7)) > $CHECKPOINT_DIR/from-terminal.txt; "
                       "cat $CHECKPOINT_DIR/from-terminal.txt")
    term.keyboard.press("Enter")
    term.wait_for_function("document.querySelector('.xterm-rows').textContent.includes('sum=42')",
                           timeout=UI_WAIT_MS)
    screens.shot(term, "terminal")
    gpus = Job.objects.get(pk=job_id).attempts.get().gpu_allocation[node.name]
    written = live.tmp / "checkpoints" / str(job_id) / "from-terminal.txt"
    assert written.read_text().strip() == f"gpus={','.join(map(str, gpus))} sum=42"

    other = browser_page(bob)
    for path in (f"/sessions/{job_id}/terminal/", f"/sessions/{job_id}/health"):
        answer = other.goto(path)
        assert answer.status == 404 and b"terminal" not in answer.body().lower().replace(b"no such", b"")
    assert other.evaluate(OPEN_SOCKET, f"/sessions/{job_id}/pty") == "refused"

    page.on("dialog", lambda dialog: dialog.accept())
    page.click("#cancel-job")
    wait_for_db(lambda: Job.objects.get(pk=job_id).state == JobState.CANCELLED, "the session to be cancelled")
    term.wait_for_selector("#terminal-status[data-state=closed]", timeout=UI_WAIT_MS)
    assert not Gpu.objects.filter(allocated_to_id=job_id).exists()
    assert term.goto(f"/sessions/{job_id}/terminal/").status == 404
