"""portal/web_processes.py: several daphne processes on one socket, supervised, as
``scripts/serve.sh web`` runs them."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from portal import web_processes
from portal.web_processes import Supervisor, default_processes
from tests.support.livestack import _database_url

ROOT = Path(__file__).resolve().parents[2]


def test_the_process_count_defaults_to_the_cores_up_to_four_and_a_bad_one_is_named() -> None:
    assert default_processes({}) == min(len(os.sched_getaffinity(0)), 4)
    assert default_processes({"WEB_PROCESSES": "3"}) == 3
    with pytest.raises(ImproperlyConfigured, match="WEB_PROCESSES"):
        default_processes({"WEB_PROCESSES": "0"})
    with pytest.raises(ImproperlyConfigured, match="WEB_PROCESSES"):
        default_processes({"WEB_PROCESSES": "many"})


def test_the_default_follows_the_cpu_affinity() -> None:
    before = os.sched_getaffinity(0)
    try:
        os.sched_setaffinity(0, {min(before)})  # as a container limited to one core
        assert default_processes({}) == 1
    finally:
        os.sched_setaffinity(0, before)


def test_a_process_that_dies_is_replaced_and_the_others_keep_running() -> None:
    supervisor = Supervisor(["sleep", "60"], 2, ())
    supervisor.start()
    try:
        first, second = supervisor.children
        first.kill()
        first.wait()
        assert supervisor.check(time.monotonic())
        assert len(supervisor.children) == 2 and second in supervisor.children and first not in supervisor.children
        assert all(c.poll() is None for c in supervisor.children)
    finally:
        supervisor.stop()
    assert all(c.poll() is not None for c in supervisor.children)


def test_nothing_is_replaced_once_stopping() -> None:
    supervisor = Supervisor(["sleep", "60"], 1, ())
    supervisor.start()
    child = supervisor.children[0]
    supervisor.stopping = True
    child.kill()
    child.wait()
    assert supervisor.check(time.monotonic())
    assert supervisor.children == [child]  # not replaced
    supervisor.stop()


def test_processes_that_keep_dying_stop_the_supervisor(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(web_processes, "RESTART_DELAY_S", 0.0)
    supervisor = Supervisor(["false"], 1, ())
    supervisor.start()
    healthy, rounds = True, 0
    while healthy and rounds < 50:
        supervisor.children[0].wait()
        healthy = supervisor.check(time.monotonic())
        rounds += 1
    assert not healthy and rounds == web_processes.GIVE_UP_DEATHS
    supervisor.stop()


def test_stop_kills_what_ignores_sigterm(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(web_processes, "STOP_GRACE_S", 0.5)
    supervisor = Supervisor([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                             "print('ready', flush=True); time.sleep(60)"], 1, ())
    supervisor._spawn = lambda cmd, pass_fds: subprocess.Popen(cmd, pass_fds=pass_fds, stdout=subprocess.PIPE)
    supervisor.start()
    child = supervisor.children[0]
    assert child.stdout.readline().strip() == b"ready"
    supervisor.stop()
    assert child.returncode == -signal.SIGKILL


def _children(pid: int) -> set[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return {int(p) for p in path.read_text().split()} if path.exists() else set()


def _status(url: str) -> int | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return answer.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return None


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_serve_web_keeps_answering_when_one_of_its_processes_is_killed(tmp_path: Path) -> None:
    url = _database_url()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "DATABASE_URL": url, "SECRET_KEY": "web-processes-test", "ALLOWED_HOSTS": "127.0.0.1",
           "DEBUG": "0", "HOST": "127.0.0.1", "PORT": str(port), "WEB_PROCESSES": "2",
           "VENV": str(Path(sys.executable).parents[1])}
    log = (tmp_path / "web.log").open("wb")
    web = subprocess.Popen(["bash", "scripts/serve.sh", "web"], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    login = f"http://127.0.0.1:{port}/accounts/login/"
    try:
        deadline = time.monotonic() + 60
        while _status(login) != 200 or len(_children(web.pid)) < 2:
            assert time.monotonic() < deadline and web.poll() is None, (tmp_path / "web.log").read_text()
            time.sleep(0.2)
        before = _children(web.pid)
        assert len(before) == 2
        victim = min(before)
        os.kill(victim, signal.SIGKILL)
        assert [_status(login) for _ in range(10)] == [200] * 10  # the other process answers meanwhile
        while len(_children(web.pid)) < 2 or victim in _children(web.pid):
            assert time.monotonic() < deadline, (tmp_path / "web.log").read_text()
            time.sleep(0.2)
        after = _children(web.pid)
        assert victim not in after and len(after - before) == 1
        web.send_signal(signal.SIGTERM)
        assert web.wait(timeout=60) == 0
        assert all(not Path(f"/proc/{pid}").exists() for pid in after)
    finally:
        if web.poll() is None:
            web.kill()
    assert "exited with status -9; starting another" in (tmp_path / "web.log").read_text()
