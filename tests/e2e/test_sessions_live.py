"""A notebook session on a full cluster is a TE job like any other: it preempts BE work, its server
starts on the node with the GPUs it was given, and the node reports where it listens."""

from __future__ import annotations

import urllib.request

from interactive import services as sessions
from interactive.models import SessionEndpoint
from scheduler.models import Job, JobEvent, JobState
from tests.e2e.conftest import train_command, wait_until
from tests.support.live_helpers import make_user, submit


def test_a_notebook_on_a_full_cluster_preempts_be_work_and_its_server_answers_only_with_the_secret(
        live, jupyter_on_path) -> None:  # noqa: ANN001
    node = live.start_agent("full", 2)
    live.wait_nodes_up(node)
    alice = make_user("alice")
    be = submit(alice, "be", command=train_command(TRAIN_STEPS=100000, TRAIN_SLEEP=0.1), num_gpus=2, grace_period=2)
    wait_until(lambda: Job.objects.get(pk=be.pk).state == JobState.RUNNING, "the BE job to fill the cluster")

    notebook = sessions.start_session(alice, "jupyter", num_gpus=1, time_limit=600)
    endpoint = wait_until(lambda: SessionEndpoint.objects.filter(job=notebook).first(), "the notebook's server to answer")
    notebook.refresh_from_db()
    assert notebook.state == JobState.RUNNING
    notice = JobEvent.objects.get(job=be, to_state=JobState.PREEMPTING)
    assert notice.reason == "PreemptedForTE" and f"TE job {notebook.pk}" in notice.message

    base = f"http://{endpoint.host}:{endpoint.port}/sessions/{notebook.pk}/api/status"
    with urllib.request.urlopen(urllib.request.Request(base, headers={"Authorization": f"token {endpoint.secret}"}),
                                timeout=30) as answer:
        assert answer.status == 200
    try:
        urllib.request.urlopen(base, timeout=30)
        refused = False
    except urllib.error.HTTPError as exc:
        refused = exc.code == 403
    assert refused, "the session's server answered without its secret"
