"""The whole system spread over hosts made of network namespaces (tests/support/netns.py).

Host ``db`` runs redis-server and a private PostgreSQL cluster, each listening
on the host's address only; host ``app`` runs the portal (daphne), a Celery
worker and Celery beat, as separate processes; hosts ``node1`` ... run one node
agent each with virtual GPUs. Every one is a real process started with
``ip netns exec``, configured only through the environment and options a real
deployment uses (``DATABASE_URL``, ``REDIS_URL`` over TLS, per-node agent tokens and
Redis users, the agent's ``--advertise-address``), so the processes reach each other only over
the bridge, by address. The file system is shared, as NFS would be between real
machines: the checkpoint root is one directory every agent is given.

``NetnsCluster.start()`` builds it (migrations and a demo user with an API token
included); ``stop()`` removes it all, processes, namespaces, bridge, and never
raises. The ``netns_cluster`` fixture hands a test a factory and always stops
what it made, whatever the outcome; ``scripts/netns-cluster.sh up|down`` runs
the same code from the command line (``main`` below).

Only tests and that script import this module; it imports no Django at import time.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import math
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.adversarial.stack import PY, REPO, PostgresServer, Proc, ServiceUnavailable, wait_for
from tests.support.procs import RUN_MARKER
from tests.support.netns import Network, NetnsUnavailable, remove_leftovers
from tests.support.tls import TlsFiles, make_certificates

BIN = Path(PY).parent
SECRET = "netns-cluster-agent-secret-not-for-deployment"
PORTAL_PORT = 8000
# Each host has its own port space, so the services keep their usual ports.
REDIS_PORT, POSTGRES_PORT = 6379, 5432


class NetnsPostgres(PostgresServer):
    """The private PostgreSQL cluster of tests/adversarial/stack.py, run inside host ``db``,
    listening on that host's address and trusting the cluster's subnet over TLS only (``tls``: the
    host's certificate and the CA clients check it against)."""

    def __init__(self, tmp: Path, net: Network, host: str, tls: TlsFiles) -> None:
        super().__init__(tmp)
        self.address, self.subnet, self.port = net.address(host), str(net.subnet), POSTGRES_PORT
        self.run_as = net.argv(host, self.run_as)
        self.tls = tls

    def url(self, dbname: str) -> str:
        return (f"postgres://postgres@{self.address}:{self.port}/{dbname}"
                f"?sslmode=verify-full&sslrootcert={self.tls.ca}")

    def init(self) -> NetnsPostgres:
        self._run(str(self.bin / "initdb"), "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8",
                  "--no-sync")
        for source, name in ((self.tls.cert, "server.crt"), (self.tls.key, "server.key")):
            shutil.copyfile(source, self.data / name)
            os.chmod(self.data / name, 0o600)
            if self.user is not None:
                os.chown(self.data / name, self.user.pw_uid, self.user.pw_gid)
        with open(self.data / "postgresql.conf", "a") as conf:
            conf.write("ssl = on\nssl_cert_file = 'server.crt'\nssl_key_file = 'server.key'\n")
        with open(self.data / "pg_hba.conf", "a") as hba:  # no line for the subnet without TLS: refused
            hba.write(f"hostssl all all {self.subnet} trust\n")
        return self.start()

    def start(self) -> NetnsPostgres:
        options = (f"-p {self.port} -k {self.dir} -c listen_addresses={self.address} -c fsync=off "
                   "-c max_connections=100")
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-l", str(self.dir / "server.log"), "-o", options,
                  "-w", "start")
        return self


@dataclass
class NetnsCluster:
    """One multi-host deployment; ``settings`` are extra environment of every server process."""

    tmp: Path
    agents: int = 2
    gpus: int = 2
    heartbeat: float = 1.0
    fence_after: float = 6.0
    settings: dict[str, str] = field(default_factory=dict)
    # Hosts spare1, ... on the network with no agent started (a test starts its own there).
    spare_hosts: int = 0
    # The code the agents run at start (a checkout of another version); None: this repository's.
    agent_code: Path | None = None
    net: Network | None = None
    postgres: NetnsPostgres | None = None
    procs: dict[str, Proc] = field(default_factory=dict)
    api_token: str = ""

    # ----- addresses -----------------------------------------------------------------

    @property
    def node_names(self) -> list[str]:
        return [f"node{i}" for i in range(1, self.agents + 1)]

    @property
    def database_url(self) -> str:
        """Over TLS, the server's certificate checked against the cluster's own CA and address."""
        return (f"postgres://postgres@{self.net.address('db')}:{POSTGRES_PORT}/gpusched"
                f"?sslmode=verify-full&sslrootcert={self.tls.ca}")

    @property
    def tls(self) -> TlsFiles:
        """The db host's certificate and the CA every client checks it against (made once)."""
        directory = self.tmp / "tls"
        if not (directory / "ca.pem").exists():
            make_certificates(directory, self.net.address("db"))
        return TlsFiles(directory / "ca.pem", directory / "server.pem", directory / "server.key")

    @property
    def redis_url(self) -> str:
        """Over TLS, checked against the cluster's own CA, as traffic between real hosts should be."""
        return (f"rediss://{self.net.address('db')}:{REDIS_PORT}/0"
                f"?ssl_cert_reqs=required&ssl_ca_certs={self.tls.ca}")

    @property
    def base_url(self) -> str:
        return f"http://{self.net.address('app')}:{PORTAL_PORT}"

    @property
    def checkpoints(self) -> Path:
        return self.tmp / "checkpoints"

    @property
    def marker(self) -> str:
        """Carried by every process of this cluster (and so by the agents' jobs): tests/procs.py."""
        return f"netns-cluster-{self.tmp}"

    # ----- life cycle ----------------------------------------------------------------

    def start(self) -> NetnsCluster:
        """Network, data services, migrations, demo user, portal, worker, beat, agents; each
        step waits for the previous one to answer. On failure, everything made is removed."""
        self.tmp.mkdir(parents=True, exist_ok=True)
        try:
            spares = [f"spare{i}" for i in range(1, self.spare_hosts + 1)]
            self.net = Network.create(["db", "app", *self.node_names, *spares])
            self._start_data_services()
            self._run_manage("migrate", "--noinput")
            credentials = self.tmp / "demo-credentials.json"
            self._run_manage("demo_users", "--credentials", str(credentials), "--url", self.base_url)
            self.api_token = json.loads(credentials.read_text())["token"]
            self.start_portal()
            self.start_worker()
            self.start_beat()
            # Each agent reaches Redis as a user of its own (docs/security.md, "Another node"); the
            # users are saved to Redis's aclfile, so a restarted Redis keeps them.
            self._run_manage("broker_acl", "--apply", *self.node_names, *spares)
            for name in self.node_names:
                self.start_agent(name, code=self.agent_code)
            self.wait_nodes_up(self.node_names)
        except BaseException:
            self.stop()
            raise
        return self

    def _start_data_services(self) -> None:
        self.start_redis()
        self.postgres = NetnsPostgres(self.tmp, self.net, "db", self.tls).init()
        self.postgres.create_database("gpusched")

    def start_redis(self) -> Proc:
        """redis-server on host db with an append-only file, as production runs it (a restart keeps
        the queued messages), serving TLS only, with a certificate of the cluster's own CA for the
        host's address."""
        redis_server = shutil.which("redis-server")
        if redis_server is None:
            raise ServiceUnavailable("redis-server is not installed (apt-get install redis-server)")
        (self.tmp / "redis").mkdir(exist_ok=True)
        (self.tmp / "redis" / "users.acl").touch()
        tls = self.tls
        proc = self._spawn("redis", "db", [redis_server, "--bind", self.net.address("db"), "--port", "0",
                                           "--tls-port", str(REDIS_PORT), "--tls-cert-file", str(tls.cert),
                                           "--tls-key-file", str(tls.key), "--tls-ca-cert-file", str(tls.ca),
                                           "--tls-auth-clients", "no",
                                           "--save", "", "--appendonly", "yes", "--appendfsync", "always",
                                           "--protected-mode", "no", "--dir", str(self.tmp / "redis"),
                                           "--aclfile", str(self.tmp / "redis" / "users.acl")])
        wait_for(self._redis_answers, "redis-server on host db")
        return proc

    def _redis_answers(self) -> bool:
        import redis

        try:
            return bool(redis.Redis.from_url(self.redis_url, socket_connect_timeout=0.5).ping())
        except redis.RedisError:
            return False

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in ("CELERY_BROKER_URL", "TEST_REDIS_URL",
                                                                "CHANNEL_LAYER_URL", "PYTEST_CURRENT_TEST")}
        env.update({
            "DJANGO_SETTINGS_MODULE": "portal.settings", "SECRET_KEY": "netns-cluster-secret-not-for-deployment",
            "DATABASE_URL": self.database_url, "REDIS_URL": self.redis_url, "GPUSCHED_AGENT_SECRET": SECRET,
            "ALLOWED_HOSTS": self.net.address("app"), "LOG_LEVEL": "INFO", "PYTHONUNBUFFERED": "1",
            "AGENT_HEARTBEAT_SECONDS": f"{self.heartbeat:g}", RUN_MARKER: self.marker,
            # The node-lost delay L must exceed fence + one heartbeat (docs/agent.md#fencing).
            "NODE_LOST_HEARTBEATS": str(math.ceil(self.fence_after / self.heartbeat) + 2),
            "SCHEDULER_TICK_SECONDS": "1", "SCHEDULER_RESUME_OVERHEAD": "0",
        })
        env.update(self.settings)
        env.update(extra)
        return env

    def _run_manage(self, *args: str) -> None:
        result = subprocess.run(self.net.argv("app", [PY, "manage.py", *args]), cwd=REPO, env=self.env(),
                                capture_output=True, text=True, timeout=600)
        if result.returncode != 0:
            raise RuntimeError(f"manage.py {args[0]} failed:\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}")

    def _spawn(self, name: str, host: str, argv: list[str], **env: str) -> Proc:
        proc = Proc(name, self.net.argv(host, argv), self.tmp / f"{name}.log", self.env(**env))
        self.procs[name] = proc
        return proc.start()

    def start_portal(self) -> Proc:
        proc = self._spawn("portal", "app", [str(BIN / "daphne"), "-b", self.net.address("app"), "-p",
                                             str(PORTAL_PORT), "portal.asgi:application"], DATABASE_POOL="true")
        wait_for(lambda: self.portal_answers() or not proc.alive(), "the portal to answer")
        if not proc.alive():
            raise RuntimeError(f"the portal exited:\n{proc.output()[-3000:]}")
        return proc

    def portal_answers(self) -> bool:
        import urllib.error
        import urllib.request

        try:
            with urllib.request.urlopen(self.base_url + "/accounts/login/", timeout=2) as response:
                return response.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def start_worker(self) -> Proc:
        proc = self._spawn("worker", "app", [PY, "-m", "celery", "-A", "portal", "worker", "--queues", "celery",
                                             "--concurrency", "2", "--hostname", "worker@app", "--without-gossip",
                                             "--without-mingle", "--loglevel", "INFO"])
        wait_for(lambda: " ready." in proc.output() or not proc.alive(), "the Celery worker to start")
        if not proc.alive():
            raise RuntimeError(f"the Celery worker exited:\n{proc.output()[-3000:]}")
        return proc

    def start_beat(self) -> Proc:
        return self._spawn("beat", "app", [PY, "-m", "celery", "-A", "portal", "beat", "--loglevel", "INFO",
                                           "--schedule", str(self.tmp / "beat-schedule")])

    def start_agent(self, name: str, *extra_args: str, code: Path | None = None, secret: str = SECRET,
                    **env: str) -> Proc:
        """Start (or restart, on the same work dir) the agent of host ``name``, from the checkout
        ``code`` (whose ``cluster`` package it imports; default this repository's), with its token and
        Redis user under the agent ``secret`` and extra ``env``; it gets none of the server's secrets."""
        from cluster import broker_acl
        from cluster.auth import node_token

        existing = self.procs.get(name)
        if existing is not None and existing.alive():
            raise RuntimeError(f"agent {name} is already running")
        # Single-user mode: jobs run as the agent's user, unconfined (no per-user accounts or cgroups here).
        own = {"GPUSCHED_AGENT_TOKEN": node_token(secret, name), "GPUSCHED_SINGLE_USER": "1"}
        if code is not None:  # an agent of another version: on the shared credentials, as it was deployed
            own["PYTHONPATH"] = str(code)
        else:
            own["REDIS_URL"] = broker_acl.node_url(self.redis_url, secret, name)
        argv = ["env", "-C", str(code or REPO), "-u", "GPUSCHED_AGENT_SECRET", "-u", "GPUSCHED_AGENT_SECRET_FALLBACKS",
                "-u", "SECRET_KEY", "-u", "DATABASE_URL", PY, "-m", "cluster.agent", "--name", name,
                "--gpus", str(self.gpus), "--workdir", str(self.tmp / "agents" / name), "--checkpoint-root",
                str(self.checkpoints), "--heartbeat", f"{self.heartbeat:g}", "--fence-after", f"{self.fence_after:g}",
                "--log-interval", "0.2", "--advertise-address", self.net.address(name), *extra_args]
        return self._spawn(name, name, argv, **{**own, **env})

    def wait_nodes_up(self, names: list[str]) -> None:
        wait_for(lambda: self.sql("SELECT count(*) FROM cluster_node WHERE name = ANY(%s) AND state = 'UP'",
                                  (names,))[0][0] == len(names), f"nodes {names} to register")

    # ----- observing -----------------------------------------------------------------

    def sql(self, query: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """Rows of ``query`` on the cluster's database, read over the network from this machine."""
        import psycopg

        with psycopg.connect(self.database_url, connect_timeout=5) as conn:
            return conn.execute(query, params).fetchall()

    def diagnostics(self, chars: int = 3000) -> str:
        return "\n".join(f"--- {name}\n{proc.output()[-chars:]}" for name, proc in self.procs.items())

    def stop(self) -> None:
        """Stop everything this cluster started and remove its network; never raises."""
        for proc in reversed(list(self.procs.values())):
            try:
                proc.stop()
            except Exception:  # the namespace teardown below kills whatever is left
                pass
        if self.postgres is not None:
            try:
                self.postgres.close()
            except Exception:
                pass
        if self.net is not None:
            self.net.destroy()


# ----- pytest fixture ------------------------------------------------------------------


@pytest.fixture
def netns_cluster(tmp_path, request):  # noqa: ANN001, ANN201
    """Factory: ``netns_cluster(agents=2, gpus=2, heartbeat=1, fence_after=6, settings={...})`` starts a
    cluster (skipped, or failed under CI, where namespaces cannot be made); every cluster made is
    stopped at teardown, whatever the outcome, with its logs printed when the test failed."""
    from tests.conftest import unavailable

    made: list[NetnsCluster] = []

    def make(**options: Any) -> NetnsCluster:
        cluster = NetnsCluster(tmp_path / f"cluster{len(made)}", **options)
        made.append(cluster)
        try:
            return cluster.start()
        except (NetnsUnavailable, ServiceUnavailable) as exc:
            unavailable(str(exc))

    try:
        yield make
    finally:
        report = getattr(request.node, "rep_call", None)
        for cluster in made:
            if report is not None and report.failed:
                sys.stderr.write(cluster.diagnostics())
            cluster.stop()


# ----- command line (scripts/netns-cluster.sh) ----------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/netns-cluster.sh",
                                     description="A multi-host deployment in network namespaces on this machine.")
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="start it in the background and print where everything is")
    up.add_argument("--dir", type=Path, default=REPO / "var" / "netns-cluster")
    up.add_argument("--agents", type=int, default=2)
    up.add_argument("--gpus", type=int, default=2)
    down = sub.add_parser("down", help="stop every process, remove namespaces, veths and bridge")
    down.add_argument("--dir", type=Path, default=REPO / "var" / "netns-cluster")
    args = parser.parse_args(argv)
    state_file = args.dir / "cluster.json"
    if args.command == "down":
        return _down(state_file)
    if state_file.exists():
        print(f"already up ({state_file}); run 'scripts/netns-cluster.sh down' first", file=sys.stderr)
        return 1
    cluster = NetnsCluster(args.dir, agents=args.agents, gpus=args.gpus)
    try:
        cluster.start()
    except (NetnsUnavailable, ServiceUnavailable) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    state = {"index": cluster.net.index, "postgres_dir": str(cluster.postgres.dir), "portal": cluster.base_url,
             "database_url": cluster.database_url, "redis_url": cluster.redis_url, "api_token": cluster.api_token,
             "hosts": {h.name: {"netns": h.netns, "address": h.address} for h in cluster.net.hosts.values()},
             "logs": str(args.dir)}
    state_file.write_text(json.dumps(state, indent=2))
    print(json.dumps(state, indent=2))
    return 0


def _down(state_file: Path) -> int:
    if not state_file.exists():
        print(f"nothing recorded in {state_file}; removing any gsmh network left on this machine", file=sys.stderr)
        print("removed:", " ".join(remove_leftovers()) or "nothing")
        return 0
    state = json.loads(state_file.read_text())
    removed = remove_leftovers(state["index"])
    shutil.rmtree(state["postgres_dir"], ignore_errors=True)
    state_file.unlink()
    print("removed:", " ".join(removed) or "nothing", f"(logs kept in {state['logs']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
