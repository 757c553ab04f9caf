"""The live system the end-to-end and browser tests run against, as one pytest plugin.

Registered once for the whole test tree (``pytest_plugins`` in
``tests/conftest.py``), so every test that asks for it shares the same fixture
definitions and a session has at most one worker, whichever directories run.

* The worker (``e2e_worker``): ``celery -A portal worker -B`` on the default
  queue, with the production settings module pointed at pytest-django's test
  database (``DATABASE_URL`` names it) and at the test Redis. Tests are
  ``transaction=True`` so the worker sees their rows. It is started when a
  test first asks for it and shared by the tests that follow and ask for it
  too (the end-to-end and browser tests alike); it is stopped as soon as the
  next test does not, because it consumes the default queue and runs
  scheduling cycles on the test database, which the other tests read and
  write themselves.
* Agents are started per test (``python -m cluster.agent``, through ``live``)
  with virtual GPUs, a 0.5 s heartbeat and a shared checkpoint root unless a
  test asks for node-local ones.
* Teardown kills every agent and every job process group the test started
  (identified by their environment, so an unrelated process is never hit),
  waits until the worker has drained the reports already queued, and only
  then lets pytest-django empty the tables.

The Redis given by ``REDIS_URL`` (the e2e tests' own database number) must be
the one this process's Celery app publishes to, since submissions enqueue
cycles from here. Nothing here imports Django at import time.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import configured_redis_url, unavailable
from tests.support.procs import group_alive, job_groups, kill_job_groups  # noqa: F401 - job_groups, group_alive re-exported

REPO = Path(__file__).resolve().parents[2]
PY = sys.executable
TRAIN = REPO / "examples" / "train_numpy.py"
TOKEN = "e2e-agent-token"
HEARTBEAT = 0.5
LOST_AFTER_HEARTBEATS = 4
# A guard against hanging forever, not a performance expectation.
WAIT = 90.0

WORKER_ENV = {
    "DJANGO_SETTINGS_MODULE": "portal.settings",
    "SCHEDULER_AUTORUN": "1",
    "SCHEDULER_TICK_SECONDS": "0.5",
    "SCHEDULER_RESUME_OVERHEAD": "0",
    "AGENT_HEARTBEAT_SECONDS": str(HEARTBEAT),
    "NODE_LOST_HEARTBEATS": str(LOST_AFTER_HEARTBEATS),
    "GPUSCHED_AGENT_TOKEN": TOKEN,
    # One shared token for the stack's agents: development mode (cluster/auth.py).
    "GPUSCHED_AGENT_DEV_MODE": "true",
    "LOG_LEVEL": "INFO",
}


def stack_secret_key() -> str:
    """The ``SECRET_KEY`` of every process of a test stack: this process's, as a deployment gives the
    portal and its workers one key (session secrets sealed by one are opened by the other)."""
    from django.conf import settings

    return settings.SECRET_KEY


def wait_until(predicate: Callable[[], Any], what: str, timeout: float = WAIT, interval: float = 0.1) -> Any:
    """Poll ``predicate`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"gave up waiting for {what}")
        time.sleep(interval)


def _database_url() -> str:
    from django.db import connection

    db = connection.settings_dict
    auth = db["USER"] + (f":{db['PASSWORD']}" if db.get("PASSWORD") else "")
    return f"postgres://{auth}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


@dataclass
class Worker:
    process: subprocess.Popen
    log_path: Path
    redis_url: str

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_idle(self) -> None:
        """Until the default queue is empty and no message is being worked on."""
        import redis

        client = redis.Redis.from_url(self.redis_url)
        quiet = 0
        deadline = time.monotonic() + WAIT
        while quiet < 3 and time.monotonic() < deadline:
            busy = client.llen("celery") or client.hlen("unacked")
            quiet = 0 if busy else quiet + 1
            time.sleep(0.1)
        client.close()


@pytest.fixture(scope="session")
def e2e_redis_url() -> str:
    import redis

    from portal.celery import app

    url = configured_redis_url()
    try:
        redis.Redis.from_url(url, socket_connect_timeout=2).ping()
    except redis.RedisError as exc:
        unavailable(f"Redis at {url} is unreachable ({exc})")
    if app.conf.broker_url != url:
        pytest.fail(f"the portal's broker {app.conf.broker_url} is not the e2e Redis {url}; set REDIS_URL only",
                    pytrace=False)
    return url


@dataclass
class WorkerSlot:
    """Room for one worker on the test database: started on demand, stopped between uses."""

    redis_url: str
    database_url: str
    tmp_path_factory: pytest.TempPathFactory
    worker: Worker | None = None
    starts: int = 0
    extra_env: dict[str, str] = field(default_factory=dict)

    def running(self, extra_env: dict[str, str] | None = None) -> Worker:
        """The worker, started first if there is none (or if it runs with other ``extra_env``, the
        ``worker_env`` marker's); a worker that died since its last use fails the test."""
        if self.worker is not None and self.worker.process.poll() is not None:
            output = self.worker.output()[-3000:]
            self.worker = None
            pytest.fail(f"the Celery worker exited while the tests used it:\n{output}")
        extra_env = dict(extra_env or {})
        if self.worker is not None and extra_env != self.extra_env:
            self.stop()
        if self.worker is None:
            self.extra_env = extra_env
            self.worker = self._start()
        return self.worker

    def _start(self) -> Worker:
        tmp = self.tmp_path_factory.mktemp("worker")
        log_path = tmp / "worker.log"
        # The worker runs with Django's async-safety check on, whatever this process has set.
        env = {k: v for k, v in os.environ.items()
               if k not in ("CELERY_BROKER_URL", "TEST_REDIS_URL", "DJANGO_ALLOW_ASYNC_UNSAFE")}
        env.update(WORKER_ENV)
        env.update(self.extra_env)
        env.update({"DATABASE_URL": self.database_url, "REDIS_URL": self.redis_url, "SECRET_KEY": stack_secret_key()})
        _clear_queue(self.redis_url)
        with open(log_path, "wb") as out:
            process = subprocess.Popen(
                [PY, "-m", "celery", "-A", "portal", "worker", "-B", "--schedule", str(tmp / "beat-schedule"),
                 "--queues", "celery", "--concurrency", "2", "--hostname", f"e2e-{uuid.uuid4().hex[:6]}@%h",
                 "--without-gossip", "--without-mingle", "--loglevel", "INFO"],
                cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            )
        worker = Worker(process, log_path, self.redis_url)
        self.starts += 1
        try:
            wait_until(lambda: " ready." in worker.output() or process.poll() is not None, "the Celery worker to start")
        except BaseException:
            _stop_group(process)
            raise
        if process.poll() is not None:
            pytest.fail(f"the Celery worker exited:\n{worker.output()[-3000:]}")
        return worker

    def stop(self) -> None:
        if self.worker is not None:
            _stop_group(self.worker.process)
            self.worker = None


_WORKER_SLOT = pytest.StashKey[WorkerSlot]()


@pytest.fixture(scope="session")
def e2e_worker_slot(django_db_setup, django_db_blocker, e2e_redis_url, tmp_path_factory,  # noqa: ANN001
                    pytestconfig) -> Iterator[WorkerSlot]:  # noqa: ANN001
    """The session's one place for a worker (see ``pytest_runtest_teardown`` for when it is emptied)."""
    from django.conf import settings

    if "postgresql" not in settings.DATABASES["default"]["ENGINE"]:
        unavailable("the end-to-end tests need PostgreSQL: set DATABASE_URL=postgres://...")
    slot = WorkerSlot(e2e_redis_url, _database_url(), tmp_path_factory)
    pytestconfig.stash[_WORKER_SLOT] = slot
    try:
        yield slot
    finally:
        slot.stop()
        del pytestconfig.stash[_WORKER_SLOT]


@pytest.fixture
def e2e_worker(e2e_worker_slot, request) -> Worker:  # noqa: ANN001
    """One Celery worker with embedded beat on the test database, shared by consecutive tests that ask for it
    (with the same ``@pytest.mark.worker_env(NAME=value, ...)``, e.g. another SCHEDULER_POLICY)."""
    marker = request.node.get_closest_marker("worker_env")
    return e2e_worker_slot.running({k: str(v) for k, v in (marker.kwargs if marker else {}).items()})


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "worker_env(**env): extra environment of the e2e Celery worker")
    _flush_retrying_deadlocks()


#: Tries of the flush that empties the test database after a live test.
FLUSH_TRIES = 5


def _flush_retrying_deadlocks() -> None:
    """After a live test the test database is emptied (``flush``: one TRUNCATE of every table) while the
    shared worker may be in a transaction of its own (a tick or a late report that began after
    ``wait_idle``); PostgreSQL then ends one of the two as a deadlock's victim. When that is the flush,
    it is run again instead of failing the test: the worker's transaction is a legitimate one."""
    from django.core.management.base import CommandError
    from django.core.management.commands import flush

    original = flush.Command.handle
    if getattr(original, "retries_deadlocks", False):
        return

    def handle(self, **options: Any) -> Any:  # noqa: ANN001
        for attempt in range(FLUSH_TRIES):
            try:
                return original(self, **options)
            except CommandError as exc:
                if "deadlock detected" not in str(exc.__cause__) or attempt == FLUSH_TRIES - 1:
                    raise
                time.sleep(0.5)
        return None

    handle.retries_deadlocks = True  # type: ignore[attr-defined]
    flush.Command.handle = handle


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None):  # noqa: ANN201
    """After a test's own teardown: stop the worker unless the next test asks for it too."""
    yield
    slot = item.config.stash.get(_WORKER_SLOT, None)
    if slot is not None and "e2e_worker" not in getattr(nextitem, "fixturenames", ()):
        slot.stop()


def _stop_group(process: subprocess.Popen) -> None:
    """SIGTERM the process group, SIGKILL what is left after a while."""
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=20)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        pass
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait(timeout=20)


def _clear_queue(url: str) -> None:
    import redis

    client = redis.Redis.from_url(url)
    client.delete("celery", "gpusched:scheduler:cycle-lock", "gpusched:scheduler:cycle-requested",
                  "gpusched:telemetry-stream")
    client.close()


@dataclass
class Agent:
    name: str
    workdir: Path
    args: list[str]
    log_path: Path
    process: subprocess.Popen | None = None

    def output(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


@dataclass
class LiveCluster:
    """Agents of one test and helpers to drive and observe the system."""

    worker: Worker
    tmp: Path
    agents: dict[str, Agent] = field(default_factory=dict)
    tag: str = field(default_factory=lambda: uuid.uuid4().hex[:6])

    def start_agent(self, prefix: str, gpus: int, *, shared_checkpoints: bool = True, extra: tuple[str, ...] = ()) -> Agent:
        """Start (or restart, with the same name and work dir) the agent ``<prefix>-<tag>``."""
        name = f"{prefix}-{self.tag}"
        agent = self.agents.get(name)
        if agent is None:
            args = ["--name", name, "--gpus", str(gpus), "--workdir", str(self.tmp / name),
                    "--heartbeat", str(HEARTBEAT), "--log-interval", "0.2", *extra]
            if shared_checkpoints:
                args += ["--checkpoint-root", str(self.tmp / "checkpoints")]
            agent = Agent(name, self.tmp / name, args, self.tmp / f"{name}.log")
            self.agents[name] = agent
        env = {k: v for k, v in os.environ.items() if k not in ("CELERY_BROKER_URL",)}
        env.update({"REDIS_URL": self.worker.redis_url, "GPUSCHED_AGENT_TOKEN": TOKEN})
        with open(agent.log_path, "ab") as out:
            # Single-user: the live tests are about scheduling; confinement has its own tests.
            agent.process = subprocess.Popen([PY, "-m", "cluster.agent", "--single-user", *agent.args], cwd=REPO, env=env,
                                             stdout=out, stderr=subprocess.STDOUT)
        return agent

    def wait_nodes_up(self, *agents: Agent) -> None:
        from cluster.models import Node, NodeState

        names = {a.name for a in agents}
        wait_until(lambda: set(Node.objects.filter(name__in=names, state=NodeState.UP).values_list("name", flat=True))
                   == names, f"nodes {sorted(names)} to register")

    def kill_agent(self, agent: Agent) -> None:
        if agent.process is not None and agent.process.poll() is None:
            agent.process.kill()
            agent.process.wait(timeout=WAIT)
        agent.process = None

    def kill_jobs_of(self, agent: Agent) -> list[int]:
        return kill_job_groups({agent.name})

    def teardown(self) -> None:
        for agent in self.agents.values():
            self.kill_agent(agent)
        kill_job_groups(set(self.agents))
        self.worker.wait_idle()
        import redis

        client = redis.Redis.from_url(self.worker.redis_url)
        for name in self.agents:
            queue = f"node.{name}"
            client.delete(queue, f"_kombu.binding.{queue}", f"_kombu.binding_permanent.{queue}")
        client.close()

    def diagnostics(self) -> str:
        parts = [f"--- worker (last 4000 chars)\n{self.worker.output()[-4000:]}"]
        for agent in self.agents.values():
            parts.append(f"--- agent {agent.name}\n{agent.output()[-3000:]}")
        return "\n".join(parts)


@pytest.fixture
def live(e2e_worker, transactional_db, settings, tmp_path, request) -> Iterator[LiveCluster]:  # noqa: ANN001
    """A cluster for one test; submissions from the test enqueue real scheduling cycles."""
    settings.SCHEDULER_AUTORUN = True
    settings.REDIS_URL = e2e_worker.redis_url
    _clear_queue(e2e_worker.redis_url)
    cluster = LiveCluster(e2e_worker, tmp_path)
    try:
        yield cluster
    finally:
        failed = getattr(request.node, "rep_call", None)
        if failed is not None and failed.failed:
            sys.stderr.write(cluster.diagnostics())
        cluster.teardown()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):  # noqa: ANN001, ANN201
    outcome = yield
    report = outcome.get_result()
    if report.when == "call":
        item.rep_call = report


def train_command(**env: Any) -> str:
    """The example training job with TRAIN_* settings."""
    settings = " ".join(f"{k}={v}" for k, v in env.items())
    return f"{settings} {PY} {TRAIN}".strip()


def reference_digest(steps: int, **env: Any) -> str:
    """params_sha256 of an uninterrupted run of the example job (no sleep), in the environment a job
    gets: built from scratch (host variables that tune the BLAS, such as OPENBLAS_CORETYPE, change the digits)."""
    run_env = {"PATH": os.environ["PATH"], "TRAIN_STEPS": str(steps), "TRAIN_SLEEP": "0", "CHECKPOINT_DIR": "",
               **{k: str(v) for k, v in env.items()}}
    import tempfile

    with tempfile.TemporaryDirectory() as ckpt:
        run_env["CHECKPOINT_DIR"] = ckpt
        out = subprocess.run([PY, str(TRAIN)], env=run_env, capture_output=True, text=True, timeout=120, check=True)
    return out.stdout.strip().splitlines()[-1].split("params_sha256=")[1]
