"""Real services for the fault tests, the load test and the load benchmarks, each a child process.

* ``RedisServer``: a private ``redis-server`` on a free port in a temp dir (no
  persistence), which a test may stop and start again on the same port;
* ``PostgresServer``: a private PostgreSQL cluster (``initdb`` + ``pg_ctl``, run
  as the ``postgres`` user when this process is root) on a free port, with its
  socket in the temp dir; stop/start keep the data;
* ``Stack``: the system's own processes pointed at given ``DATABASE_URL`` and
  ``REDIS_URL``: the portal (``daphne``, one of the processes ``scripts/serve.sh web`` runs),
  a Celery worker with embedded beat, and node agents with virtual GPUs.

The shared PostgreSQL and Redis of the machine are never restarted or flushed:
a fault test that restarts a server uses one of these private ones. Nothing
here imports Django or pytest, so the benchmarks use it too.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support.procs import RUN_MARKER, job_groups, kill_job_groups

REPO = Path(__file__).resolve().parents[2]
PY = sys.executable
BIN = Path(PY).parent
# A guard against hanging forever, not a performance expectation.
WAIT = 120.0


class ServiceUnavailable(RuntimeError):
    """A binary this harness needs is missing (the caller skips, or fails under CI)."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(predicate: Callable[[], Any], what: str, timeout: float = WAIT, interval: float = 0.1) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"gave up waiting for {what}")
        time.sleep(interval)


def stop_group(process: subprocess.Popen | None, sig: int = signal.SIGTERM, timeout: float = 20.0) -> None:
    """Signal the process group ``process`` leads; SIGKILL whatever is left after ``timeout``."""
    if process is None:
        return
    try:
        os.killpg(process.pid, sig)
        process.wait(timeout=timeout)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        pass
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait(timeout=timeout)


# --- Redis -------------------------------------------------------------------------------


class RedisServer:
    """A private redis-server; ``restart()`` keeps the port (and, having no persistence, loses data)."""

    def __init__(self, tmp: Path, persist: bool = False, args: tuple[str, ...] = ()) -> None:
        self.persist = persist  # append-only file, fsync on every write: a restart keeps queued messages
        self.args = args  # more redis-server options, such as --aclfile
        self.binary = shutil.which("redis-server")
        if self.binary is None:
            raise ServiceUnavailable("redis-server is not installed (apt-get install redis-server)")
        self.dir = tmp / "redis"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        import redis

        log = open(self.dir / "redis.log", "ab")
        self.process = subprocess.Popen(
            [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "yes" if self.persist else "no", "--appendfsync", "always", "--dir", str(self.dir),
             *self.args],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )

        def up() -> bool:
            try:
                return bool(redis.Redis.from_url(self.url, socket_connect_timeout=0.5).ping())
            except redis.RedisError:
                return False

        wait_for(up, f"redis-server on port {self.port}")
        return self

    def stop(self) -> None:
        stop_group(self.process)
        self.process = None

    def restart(self, down_for: float = 0.0) -> None:
        self.stop()
        time.sleep(down_for)
        self.start()


# --- PostgreSQL ----------------------------------------------------------------------------


def _pg_bin() -> Path:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda p: p.parent.parent.name)
    if found:
        return found[-1].parent
    initdb = shutil.which("initdb")
    if initdb is None:
        raise ServiceUnavailable("PostgreSQL server binaries (initdb, pg_ctl) are not installed")
    return Path(initdb).parent


class PostgresServer:
    """A private PostgreSQL cluster in a temp dir; trust authentication for local connections."""

    def __init__(self, tmp: Path) -> None:
        import tempfile

        self.bin = _pg_bin()
        # Not under ``tmp``: pytest's temp dirs are private to root, and the server may run as postgres.
        self.dir = Path(tempfile.mkdtemp(prefix="gpusched-pg-"))
        self.data = self.dir / "data"
        self.port = free_port()
        self.user = None
        self.run_as: list[str] = []
        if os.geteuid() == 0:  # PostgreSQL refuses to run as root
            try:
                self.user = pwd.getpwnam("postgres")
            except KeyError:
                raise ServiceUnavailable("running as root and there is no 'postgres' user to run PostgreSQL as") from None
            self.run_as = ["runuser", "-u", "postgres", "--"]
        if self.user is not None:
            os.chmod(self.dir, 0o700)
            os.chown(self.dir, self.user.pw_uid, self.user.pw_gid)

    def url(self, dbname: str) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{dbname}"

    def _run(self, *args: str) -> None:
        subprocess.run([*self.run_as, *args], check=True, capture_output=True, timeout=WAIT)

    def init(self) -> PostgresServer:
        self._run(str(self.bin / "initdb"), "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8",
                  "--no-sync")
        return self.start()

    def start(self) -> PostgresServer:
        options = f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200"
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-l", str(self.dir / "server.log"), "-o", options,
                  "-w", "start")
        return self

    def stop(self, mode: str = "fast") -> None:
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop")

    def restart(self, down_for: float = 0.0, mode: str = "fast") -> None:
        self.stop(mode)
        time.sleep(down_for)
        self.start()

    def create_database(self, name: str) -> str:
        import psycopg

        with psycopg.connect(self.url("postgres"), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def close(self) -> None:
        try:
            self.stop("immediate")
        except subprocess.CalledProcessError:
            pass
        shutil.rmtree(self.dir, ignore_errors=True)


# --- The system's processes ------------------------------------------------------------------


@dataclass
class Proc:
    name: str
    args: list[str]
    log_path: Path
    env: dict[str, str]
    process: subprocess.Popen | None = None

    def start(self) -> Proc:
        with open(self.log_path, "ab") as out:
            self.process = subprocess.Popen(self.args, cwd=REPO, env=self.env, stdout=out, stderr=subprocess.STDOUT,
                                            start_new_session=True)
        return self

    def output(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Signal the whole process group (a worker's pool children die with it)."""
        if self.alive():
            os.killpg(self.process.pid, sig)
            self.process.wait(timeout=WAIT)
        self.process = None

    def stop(self) -> None:
        stop_group(self.process)
        self.process = None


@dataclass
class Stack:
    """The portal, a worker with beat and agents of one test or benchmark, on the given services."""

    tmp: Path
    database_url: str
    redis_url: str
    settings: dict[str, str] = field(default_factory=dict)
    procs: dict[str, Proc] = field(default_factory=dict)
    portal_port: int | None = None

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in ("CELERY_BROKER_URL", "TEST_REDIS_URL",
                                                                "CHANNEL_LAYER_URL", "PYTEST_CURRENT_TEST")}
        env.update({
            "DJANGO_SETTINGS_MODULE": "portal.settings",
            "SECRET_KEY": "adversarial-only-secret-key-not-for-deployment",
            # Stacks without GPUSCHED_AGENT_SECRET use a shared token: development mode (cluster/auth.py).
            "GPUSCHED_AGENT_DEV_MODE": "true",
            "DATABASE_URL": self.database_url,
            "REDIS_URL": self.redis_url,
            "LOG_LEVEL": "INFO",
            "PYTHONUNBUFFERED": "1",
            # Inherited by the agents' jobs: this stack's jobs are told from those of another run's
            # agents of the same name (tests/support/procs.py).
            RUN_MARKER: self.marker,
        })
        env.update(self.settings)
        env.update(extra)
        return env

    @property
    def marker(self) -> str:
        """What this stack's processes (and so its agents' jobs) carry as ``RUN_MARKER``."""
        return str(self.tmp)

    def job_groups(self, *node_names: str) -> list[int]:
        """Process groups of the jobs this stack's agents ``node_names`` (default: all) started."""
        names = node_names or [name for name, proc in self.procs.items() if "--name" in proc.args]
        return job_groups(names, self.marker)

    def kill_jobs(self, *node_names: str) -> list[int]:
        """SIGKILL the jobs of this stack's agents ``node_names`` (default: all); return their groups."""
        names = node_names or [name for name, proc in self.procs.items() if "--name" in proc.args]
        return kill_job_groups(names, self.marker)

    def _proc(self, name: str, args: list[str], **env: str) -> Proc:
        proc = Proc(name, args, self.tmp / f"{name}.log", self.env(**env))
        self.procs[name] = proc
        return proc.start()

    def migrate(self) -> None:
        subprocess.run([PY, "manage.py", "migrate", "--noinput"], cwd=REPO, env=self.env(), check=True,
                       capture_output=True, timeout=600)

    def portal(self, name: str = "portal", **env: str) -> Proc:
        """daphne on a free port, one process as scripts/serve.sh web runs each, with its defaults
        (``env`` added to its environment); returns once it answers."""
        self.portal_port = self.portal_port or free_port()
        proc = self._proc(name, [str(BIN / "daphne"), "-b", "127.0.0.1", "-p", str(self.portal_port),
                                 "portal.asgi:application"],
                          **{"DATABASE_POOL": "true", "DATABASE_LOCK_WAIT_S": "5", **env})
        wait_for(lambda: self._answers("/accounts/login/") or not proc.alive(), "the portal to answer")
        if not proc.alive():
            raise RuntimeError(f"the portal exited:\n{proc.output()[-3000:]}")
        return proc

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.portal_port}"

    def _answers(self, path: str) -> bool:
        try:
            with urllib.request.urlopen(self.base_url + path, timeout=2) as response:
                return response.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def worker(self, name: str = "worker", beat: bool = True, concurrency: int = 2, **env: str) -> Proc:
        args = [PY, "-m", "celery", "-A", "portal", "worker", "--queues", "celery", "--concurrency", str(concurrency),
                "--hostname", f"{name}-{os.getpid()}@%h", "--without-gossip", "--without-mingle", "--loglevel", "INFO"]
        if beat:
            args[6:6] = ["-B", "--schedule", str(self.tmp / f"{name}-beat-schedule")]
        proc = self._proc(name, args, **env)
        wait_for(lambda: " ready." in proc.output() or not proc.alive(), f"the Celery worker {name} to start")
        if not proc.alive():
            raise RuntimeError(f"the Celery worker exited:\n{proc.output()[-3000:]}")
        return proc

    def agent(self, name: str, gpus: int, *, heartbeat: float, token: str = "", checkpoints: Path | None = None,
              extra_args: tuple[str, ...] = (), **env: str) -> Proc:
        args = [PY, "-m", "cluster.agent", "--name", name, "--gpus", str(gpus), "--workdir", str(self.tmp / name),
                "--heartbeat", str(heartbeat), "--log-interval", "0.2", "--single-user", *extra_args]
        if checkpoints is not None:
            args += ["--checkpoint-root", str(checkpoints)]
        existing = self.procs.get(name)
        if existing is not None and existing.alive():
            raise RuntimeError(f"agent {name} is already running")
        return self._proc(name, args, GPUSCHED_AGENT_TOKEN=token, **env)

    def supervise(self, name: str, start: Callable[[], Proc], interval: float = 0.5) -> list[float]:
        """Restart process ``name`` with ``start()`` whenever it exits, as a deployment's restart policy
        does (compose ``restart: unless-stopped``, systemd ``Restart=always``). Returns the list the
        restart times are appended to; ``stop_all`` ends the supervision."""
        import threading

        restarts: list[float] = []
        self._supervising = getattr(self, "_supervising", threading.Event())

        def watch() -> None:
            while not self._supervising.wait(interval):
                proc = self.procs.get(name)
                if proc is not None and proc.process is not None and proc.process.poll() is not None:
                    restarts.append(time.time())
                    try:
                        start()
                    except Exception:  # the next round tries again
                        pass

        threading.Thread(target=watch, name=f"supervise-{name}", daemon=True).start()
        return restarts

    def diagnostics(self, chars: int = 3000) -> str:
        return "\n".join(f"--- {name}\n{proc.output()[-chars:]}" for name, proc in self.procs.items())

    def stop_all(self) -> None:
        if getattr(self, "_supervising", None) is not None:
            self._supervising.set()
            time.sleep(0.6)
        for proc in reversed(list(self.procs.values())):
            proc.stop()
