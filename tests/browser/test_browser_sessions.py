"""A notebook in a real browser: started from the form, reached through the portal's proxy only.

Chromium starts a notebook from "Start a notebook", waits for "Open" on the
job page, loads JupyterLab through the proxy, runs a cell (JupyterLab's REST
API and kernel websocket, from the page, through the proxy) that prints its
CUDA_VISIBLE_DEVICES and writes into its checkpoint directory; another user
gets 404 and no byte of the session; stopping frees the GPUs and the URL stops
answering. Needs JupyterLab where the agent's jobs run (the ``sessions`` extra).
"""

from __future__ import annotations

import re

import pytest

from tests.browser.conftest import UI_WAIT_MS, wait_for_db
from tests.support.notebook import CELL, RUN_CELL

pytestmark = [pytest.mark.browser, pytest.mark.postgres, pytest.mark.redis]


def test_a_notebook_from_the_form_runs_a_cell_on_its_gpu_only_for_its_owner_and_stops(
        live, browser_page, user_factory, screens, jupyter_on_path):  # noqa: ANN001
    from cluster.models import Gpu
    from interactive.models import SessionEndpoint
    from scheduler.models import Job, JobState

    node = live.start_agent("nb", 2)
    live.wait_nodes_up(node)
    alice, bob = user_factory("alice"), user_factory("bob")

    page = browser_page(alice)
    page.goto("/sessions/new/")
    page.select_option("#id_kind", "jupyter")
    page.fill("#id_num_gpus", "1")
    page.fill("#id_time_limit", "900")
    screens.shot(page, "start-form")
    page.click("#start-session")
    page.wait_for_url(re.compile(r".*/jobs/\d+/$"))
    job_id = int(page.url.rstrip("/").rsplit("/", 1)[1])
    page.wait_for_selector("#session-open:not([hidden])", timeout=UI_WAIT_MS)
    assert page.text_content("#session-phase") == "ready"
    screens.shot(page, "session-ready")
    secret = SessionEndpoint.objects.get(job_id=job_id).secret
    job = Job.objects.get(pk=job_id)
    gpus = job.attempts.get().gpu_allocation[node.name]

    # The lab page itself, through the proxy: JupyterLab's page, without its token.
    lab = page.context.new_page()
    response = lab.goto(page.get_attribute("#session-open", "href"))
    assert response.status == 200
    html = lab.content()
    assert "jupyter-config-data" in html and secret not in html
    # No prompt to fetch Jupyter's news from the internet on a new user's first visit.
    config = lab.evaluate("JSON.parse(document.getElementById('jupyter-config-data').textContent)")
    assert "@jupyterlab/apputils-extension:announcements" in config["disabledExtensions"]
    screens.shot(lab, "lab")
    result = lab.evaluate(RUN_CELL, [f"/sessions/{job_id}/", CELL])
    assert "error" not in result, result
    assert f"gpus={','.join(map(str, gpus))}" in result["out"]
    written = live.tmp / "checkpoints" / str(job_id) / "from-notebook.txt"
    assert written.read_text() == "written by a cell"
    from scheduler.models import AttemptLog

    logged = "\n".join(AttemptLog.objects.filter(attempt__job_id=job_id).values_list("text", flat=True))
    assert "Jupyter Server" in logged and secret not in logged  # the job's log reaches its page

    # Another user: 404, no byte of the session, for the page and the API.
    other = browser_page(bob)
    for path in (f"/sessions/{job_id}/lab", f"/sessions/{job_id}/api/kernels"):
        answer = other.goto(path)
        body = answer.body()
        assert answer.status == 404 and b"jupyter" not in body.lower() and secret.encode() not in body
    assert other.evaluate("""async (url) => await new Promise((resolve) => {
        const ws = new WebSocket("ws://" + location.host + url);
        ws.onopen = () => resolve("open"); ws.onerror = () => resolve("refused"); })""",
                          f"/sessions/{job_id}/api/kernels/{result['kernel']}/channels") == "refused"

    # Stop: the GPUs are free again and the URL stops answering.
    page.on("dialog", lambda dialog: dialog.accept())
    page.click("#cancel-job")
    wait_for_db(lambda: Job.objects.get(pk=job_id).state == JobState.CANCELLED, "the session to be cancelled")
    assert not Gpu.objects.filter(allocated_to_id=job_id).exists()
    assert lab.goto(f"/sessions/{job_id}/lab").status == 404
    page.goto(f"/jobs/{job_id}/")
    page.wait_for_function("document.getElementById('session-phase').textContent === 'ended'", timeout=UI_WAIT_MS)
    assert "cancelled by alice" in page.text_content("#session-detail")
    screens.shot(page, "session-ended")
