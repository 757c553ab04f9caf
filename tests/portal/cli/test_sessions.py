"""``gpusched notebook`` / ``gpusched shell``: submit, wait until ready, print and open the URL."""

from __future__ import annotations

import argparse
import io
from types import SimpleNamespace

import pytest

from portal.cli.client import ApiError
from portal.cli.sessions import cmd_session


class FakeClient:
    def __init__(self, phases: list[dict]) -> None:
        self.settings = SimpleNamespace(url="http://portal.test")
        self.phases = phases
        self.posted: list[dict] = []

    def start_session(self, payload: dict) -> dict:
        self.posted.append(payload)
        return self.phases.pop(0)

    def session_status(self, job_id: int) -> dict:
        return self.phases.pop(0)


def status(phase: str, **kw) -> dict:  # noqa: ANN003
    return {"job": 7, "state": "RUNNING", "phase": phase, "url": None, **kw}


def args(cmd: str = "notebook", **kw) -> argparse.Namespace:  # noqa: ANN003
    return argparse.Namespace(**{"cmd": cmd, "gpus": 2, "time_limit": 1800.0, "image": None, "no_open": False,
                                 "wait": 60.0, "json": False, **kw})


def test_notebook_waits_until_ready_then_prints_and_opens_the_url() -> None:
    client = FakeClient([status("queued"), status("starting"), status("ready", url="/sessions/7/lab")])
    opened, out = [], io.StringIO()
    assert cmd_session(client, args(), out, open_url=opened.append, sleep=lambda s: None) == 0
    assert client.posted == [{"kind": "jupyter", "num_gpus": 2, "time_limit": 1800}]
    assert out.getvalue().splitlines()[-1] == "http://portal.test/sessions/7/lab"
    assert opened == ["http://portal.test/sessions/7/lab"]


def test_shell_with_no_open_only_prints() -> None:
    client = FakeClient([status("ready", url="/sessions/7/terminal/")])
    opened, out = [], io.StringIO()
    assert cmd_session(client, args("shell", no_open=True, time_limit=None), out, open_url=opened.append) == 0
    assert client.posted == [{"kind": "terminal", "num_gpus": 2}]
    assert opened == [] and "http://portal.test/sessions/7/terminal/" in out.getvalue()


def test_a_session_that_ends_before_it_is_ready_is_an_error_and_nothing_opens() -> None:
    client = FakeClient([status("starting"), status("ended", ended_reason="the session's server exited with code 127")])
    opened: list = []
    with pytest.raises(ApiError, match="exited with code 127"):
        cmd_session(client, args(), io.StringIO(), open_url=opened.append, sleep=lambda s: None)
    assert opened == []


def test_the_wait_runs_out() -> None:
    client = FakeClient([status("queued")] * 5)
    with pytest.raises(ApiError, match="not ready after 0 s"):
        cmd_session(client, args(wait=0.0), io.StringIO(), open_url=lambda u: None, sleep=lambda s: None)


@pytest.mark.django_db(transaction=True)
def test_against_the_portal_the_notebook_is_submitted_and_the_wait_reported(roles, live_server, token_for, run_cli) -> None:  # noqa: ANN001
    from scheduler.models import Job

    env = {"GPUSCHED_URL": live_server.url, "GPUSCHED_TOKEN": token_for(roles.owner)}
    code, out, err = run_cli("notebook", "--gpus", "1", "--time-limit", "10m", "--no-open", "--wait", "0", env=env)
    job = Job.objects.get()
    assert code == 1 and f"session {job.pk} submitted" in out and "not ready" in err
    assert (job.session_kind, job.time_limit, job.job_class) == ("jupyter", 600, "TE")
    code, _, err = run_cli("shell", "--gpus", "0", "--no-open", env=env)
    assert code != 0 and "num_gpus" in err and Job.objects.count() == 1
