"""Helpers for the node agent tests: agents as real processes, their reports, jobs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from cluster import protocol, message_signing
from cluster.agent.supervisor import Supervisor
from tests.support.procs import group_alive, kill_group  # noqa: F401 - re-exported to the agent tests

REPO = Path(__file__).resolve().parents[3]
TRAIN = REPO / "examples" / "train_numpy.py"
SHELL_EXAMPLE = REPO / "examples" / "sleep_and_checkpoint.sh"
PY = sys.executable
# A guard against hanging forever, not a performance expectation.
WAIT = 60.0

Report = tuple[str, dict[str, Any]]


def wait_until(predicate: Callable[[], Any], timeout: float = WAIT, interval: float = 0.05, what: str = "condition") -> Any:
    """Poll ``predicate`` until it returns something truthy; fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"gave up waiting for {what}")
        time.sleep(interval)


class ReportReader:
    """Reads REPORT_* task messages from ``queue_name``, keeping those of one node.

    Reports of other nodes (left by earlier tests) are consumed and dropped. Each kept report's
    signature is checked with ``token`` and replaced by ``signed`` (whether it verified; ``signed_at``
    is dropped), so two sends of the same report compare equal.
    """

    def __init__(self, url: str, node: str, queue_name: str, token: str = "") -> None:
        from kombu import Connection, Exchange, Queue

        self.node = node
        self.token = token
        self.queue_name = queue_name
        self.conn = Connection(url)
        queue = Queue(queue_name, Exchange(queue_name, type="direct"), routing_key=queue_name)
        self.queue = self.conn.SimpleQueue(queue)
        self.reports: list[Report] = []

    def pump(self) -> None:
        while True:
            try:
                message = self.queue.get(block=True, timeout=0.05)
            except self.queue.Empty:
                return
            task = message.headers["task"]
            args, kwargs, _embed = message.decode()
            message.ack()
            assert args == [], f"{task} carried positional args {args!r}"
            if kwargs.get("node") == self.node:
                signed = message_signing.verifies(self.token, task, kwargs)
                kept = {k: v for k, v in kwargs.items() if k not in ("signature", "signed_at")}
                self.reports.append((task, {**kept, "signed": signed}))

    def all(self, task: str, **match: Any) -> list[dict[str, Any]]:
        self.pump()
        return [kw for t, kw in self.reports if t == task and all(kw.get(k) == v for k, v in match.items())]

    def wait(self, task: str, timeout: float = WAIT, **match: Any) -> dict[str, Any]:
        """The first ``task`` report whose kwargs include ``match``."""
        found = wait_until(lambda: self.all(task, **match), timeout, what=f"{task} {match} from {self.node}")
        return found[0]

    def wait_heartbeat(self, predicate: Callable[[dict[str, Any]], bool], what: str) -> dict[str, Any]:
        """A heartbeat received from now on that satisfies ``predicate``."""
        seen = len(self.all(protocol.REPORT_HEARTBEAT))
        return wait_until(
            lambda: next((hb for hb in self.all(protocol.REPORT_HEARTBEAT)[seen:] if predicate(hb)), None),
            what=f"heartbeat with {what}",
        )

    def log_lines(self, job_id: Any, attempt: int) -> list[str]:
        return [line for kw in self.all(protocol.REPORT_LOG, job_id=job_id, attempt=attempt) for line in kw["lines"]]

    def wait_log(self, job_id: Any, attempt: int, predicate: Callable[[str], bool], what: str) -> str:
        return wait_until(
            lambda: next((line for line in self.log_lines(job_id, attempt) if predicate(line)), None),
            what=f"log line of {job_id}/{attempt}: {what}",
        )

    def close(self) -> None:
        self.queue.close()
        self.conn.release()


class Node:
    """One agent process under test, its command sender and its reports.

    Unless ``default_queue``, the agent sends its reports to a queue of its own
    (``--report-queue``): the default queue is shared by every test session on
    the same Redis database, and a reader in one session would drop the other
    session's reports.
    """

    def __init__(self, url: str, tmp: Path, extra_args: list[str], default_queue: bool = False) -> None:
        from celery import Celery

        self.url = url
        self.name = f"t-{uuid.uuid4().hex[:10]}"
        self.workdir = tmp / self.name
        self.token = "node-secret"
        self.report_queue = protocol.REPORT_QUEUE if default_queue else f"reports.{self.name}"
        self.extra_args = extra_args if default_queue else [*extra_args, "--report-queue", self.report_queue]
        self.reports = ReportReader(url, self.name, self.report_queue, self.token)
        self.app = Celery("agent-tests", broker=url, set_as_current=False)
        self.agent: subprocess.Popen | None = None
        # These tests are about supervision, not confinement (tests/adversarial/test_adv_isolation.py).
        self.single_user = True
        self.agent_logs: list[Path] = []
        self.pgids: set[int] = set()

    # ----- agent process -----------------------------------------------------

    def start(self, *more_args: str) -> None:
        log_path = self.workdir.parent / f"{self.name}-agent-{len(self.agent_logs)}.log"
        self.agent_logs.append(log_path)
        env = {k: v for k, v in os.environ.items() if k not in ("CELERY_BROKER_URL", "REDIS_URL")}
        env[protocol.ENV_AGENT_TOKEN] = self.token
        with open(log_path, "wb") as out:
            self.agent = subprocess.Popen(
                [PY, "-m", "cluster.agent", "--name", self.name, "--gpus", "2", "--broker", self.url,
                 "--workdir", str(self.workdir), "--heartbeat", "0.3", "--log-interval", "0.2",
                 *(["--single-user"] if self.single_user else []), *self.extra_args, *more_args],
                cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT,
            )

    def stop_agent(self, sig: int = signal.SIGKILL) -> int:
        assert self.agent is not None
        self.remember_pgids()
        self.agent.send_signal(sig)
        code = self.agent.wait(timeout=WAIT)
        self.agent = None
        return code

    def agent_output(self) -> str:
        return "\n".join(p.read_text(errors="replace") for p in self.agent_logs if p.exists())

    def remember_pgids(self) -> None:
        self.pgids.update(kw["pid"] for kw in self.reports.all(protocol.REPORT_STARTED))
        state = self.workdir / "agent-state.json"
        if state.exists():
            self.pgids.update(a["pgid"] for a in json.loads(state.read_text()).get("attempts", []))

    # ----- commands ----------------------------------------------------------

    def send(self, task: str, **kwargs: Any) -> None:
        """Send a command as the server does: signed with the node's token (``send_unsigned``: as anyone else)."""
        self.send_unsigned(task, **message_signing.signed(self.token, task, kwargs, time.time()))

    def send_unsigned(self, task: str, **kwargs: Any) -> None:
        self.app.send_task(task, kwargs=kwargs, queue=protocol.node_queue(self.name))

    def launch(self, job_id: Any, attempt: int, command: str, **fields: Any) -> None:
        cmd = protocol.LaunchCommand(job_id=job_id, attempt=attempt, command=command, **fields)
        self.send(protocol.AGENT_LAUNCH, **cmd.to_kwargs())

    def job_dir(self, job_id: Any) -> Path:
        return self.workdir / "jobs" / str(job_id)

    def checkpoint_dir(self, job_id: Any) -> Path:
        return self.workdir / "checkpoints" / str(job_id)

    # ----- teardown ----------------------------------------------------------

    def cleanup(self) -> None:
        if self.agent is not None and self.agent.poll() is None:
            self.agent.kill()
            self.agent.wait(timeout=WAIT)
        self.remember_pgids()
        for pgid in self.pgids:
            kill_group(pgid)
        import redis

        try:
            self.reports.close()
            client = redis.Redis.from_url(self.url, socket_connect_timeout=2)
            queue = protocol.node_queue(self.name)
            for name in {queue, self.report_queue} - {protocol.REPORT_QUEUE}:
                client.delete(name, f"_kombu.binding.{name}", f"_kombu.binding_permanent.{name}")
            client.close()
        except (redis.RedisError, OSError):
            pass  # a test's private broker may already be gone


def train_command(**env: Any) -> str:
    """Shell command running the example training job with TRAIN_* settings."""
    settings = " ".join(f"{k}={v}" for k, v in env.items())
    return f"{settings} {PY} {TRAIN}".strip()


def step_numbers(lines: list[str]) -> list[int]:
    """The step numbers of train_numpy's 'step N/M ...' progress lines, in order."""
    return [int(line.split()[1].split("/")[0]) for line in lines if line.startswith("step ")]


class PrivateRedis:
    """A throw-away redis-server on a free port, without persistence."""

    def __init__(self, tmp: Path) -> None:
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.tmp = tmp
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        import redis

        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", str(self.tmp)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )

        def up() -> bool:
            try:
                return bool(redis.Redis(port=self.port, socket_connect_timeout=0.5).ping())
            except redis.RedisError:
                return False

        wait_until(up, what=f"redis-server on port {self.port}")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=WAIT)
            self.proc = None


class Harness:
    """A Supervisor of its own in a temporary directory, stepped by the test; its reports are kept in order."""

    def __init__(self, tmp: Path) -> None:
        self.reports: list[tuple[str, dict[str, Any]]] = []
        self.tmp = tmp
        self.sup = self.make()

    def make(self) -> Supervisor:
        return Supervisor(
            node="unit",
            workdir=self.tmp / "work",
            checkpoint_root=self.tmp / "ckpt",
            gpu_count=4,
            emit=lambda task, kw: self.reports.append((task, kw)),
            base_env={**os.environ, protocol.ENV_AGENT_TOKEN: "secret"},
        )

    def launch(self, job: Any, attempt: int, command: str, **fields: Any) -> str:
        return self.sup.launch(protocol.LaunchCommand(job_id=job, attempt=attempt, command=command, **fields).to_kwargs())

    def of(self, task: str, **match: Any) -> list[dict[str, Any]]:
        return [kw for t, kw in self.reports if t == task and all(kw.get(k) == v for k, v in match.items())]

    def step(self) -> None:
        self.sup.tick()
        self.sup.stream_logs()

    def until(self, predicate, what: str):
        def check():
            self.step()
            return predicate()

        return wait_until(check, what=what)

    def exited(self, job: Any, attempt: int = 1) -> dict[str, Any]:
        return self.until(lambda: next(iter(self.of(protocol.REPORT_EXITED, job_id=job, attempt=attempt)), None), f"{job} exit")

    def lines(self, job: Any, attempt: int = 1) -> list[str]:
        return [line for kw in self.of(protocol.REPORT_LOG, job_id=job, attempt=attempt) for line in kw["lines"]]

    def wait_line(self, job: Any, predicate, attempt: int = 1) -> str:
        return self.until(lambda: next((l for l in self.lines(job, attempt) if predicate(l)), None), f"log line of {job}")
