"""A notebook session on a full cluster is a TE job like any other: it preempts BE work, its server
starts on the node with the GPUs it was given, and the node reports where it listens."""

from __future__ import annotations

import base64
import re
import threading
import urllib.request

import redis

from interactive import services as sessions
from interactive.models import SessionEndpoint
from scheduler.models import Job, JobEvent, JobState
from tests.e2e.conftest import train_command, wait_until
from tests.support.live_helpers import make_user, submit
from tests.support.livestack import TOKEN as AGENT_TOKEN


class BrokerTraffic:
    """Every command Redis executes while it runs (MONITOR), with each Celery message's base64 body
    decoded beside it: what anyone reading the broker, its append-only file or its backups could see."""

    _BODY = re.compile(r'\\?"body\\?": \\?"([A-Za-z0-9+/=]+)')

    def __init__(self, url: str) -> None:
        self.seen: list[str] = []
        self._monitor = redis.Redis.from_url(url).monitor()
        self._connection = self._monitor.__enter__()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        try:
            for entry in self._connection.listen():
                command = entry.get("command", "")
                self.seen.append(command)
                self.seen.extend(base64.b64decode(body).decode("utf-8", "replace") for body in self._BODY.findall(command))
        except (redis.ConnectionError, ValueError):
            return

    def stop(self) -> list[str]:
        self._connection.connection.disconnect()
        self._thread.join(timeout=5)
        return self.seen


def test_a_notebook_on_a_full_cluster_preempts_be_work_and_its_server_answers_only_with_the_secret(
        live, jupyter_on_path) -> None:  # noqa: ANN001
    traffic = BrokerTraffic(live.worker.redis_url)
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

    seen = traffic.stop()
    reports = [text for text in seen if "cluster.session" in text]
    assert reports, "the session's report was not seen on the broker"
    assert any("sealed_secret" in text for text in reports)
    assert not [text for text in seen if endpoint.secret in text], "the session's secret crossed the broker in clear"
    assert not [text for text in seen if AGENT_TOKEN in text], "the agent's token crossed the broker"
