"""Node agent latency through a real broker: command sent -> process started / gone.

Starts one agent (`python -m cluster.agent`, 1 virtual GPU) on a temporary work
dir and, for each sample:

* launch: ``send_task(AGENT_LAUNCH)`` of ``exec sleep 60`` to the job process
  group existing (REPORT_STARTED's ``started_at``) and to REPORT_STARTED being
  received from the default queue;
* preempt: ``send_task(AGENT_PREEMPT)`` with a 10 s grace period, of that job
  (which dies at once on SIGTERM), to the last job process gone
  (REPORT_EXITED's ``ended_at``) and to REPORT_EXITED being received.

All timestamps come from this machine's clock. Needs Redis (default: database 3);
the agent reports to a queue of the benchmark's own (``--report-queue``).

    .venv/bin/python benchmarks/agent_latency.py --samples 100 --json agent_latency.json

Confinement (as root, docs/agent.md): ``--confined USER`` starts the agent
without ``--single-user`` and launches every job as ``USER`` with a cgroup
(1 CPU, 1 GiB); ``--image TARBALL`` (with ``--confined``) also runs every job in
that root filesystem tarball under bubblewrap. The first launch of an image
unpacks it; it is a warm-up sample reported apart (``image_cold_launch_ms``),
so the percentiles are those of a cached image. Without ``--confined`` the agent
runs in single-user mode, as before. ``--node-user`` gives the agent a Redis user of its own, as
``manage.py broker_acl`` does (docs/security.md), deleted afterwards.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from celery import Celery  # noqa: E402
from kombu import Connection, Exchange, Queue  # noqa: E402

from cluster import broker_acl, protocol  # noqa: E402


class Reports:
    def __init__(self, url: str, node: str, queue: str) -> None:
        self.node = node
        self.conn = Connection(url)
        q = Queue(queue, Exchange(queue, type="direct"), routing_key=queue)
        self.queue = self.conn.SimpleQueue(q)

    def wait(self, task: str, timeout: float = 60.0, **match: Any) -> tuple[dict[str, Any], float]:
        """The next ``task`` report of this node matching ``match``, and when it was received."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                message = self.queue.get(block=True, timeout=0.5)
            except self.queue.Empty:
                continue
            received = time.time()
            _args, kwargs, _embed = message.decode()
            name = message.headers["task"]
            message.ack()
            if name == task and kwargs.get("node") == self.node and all(kwargs.get(k) == v for k, v in match.items()):
                return kwargs, received
        raise TimeoutError(f"no {task} {match} within {timeout}s")


def percentiles(values_s: list[float]) -> dict[str, float]:
    ms = sorted(v * 1000 for v in values_s)
    q = statistics.quantiles(ms, n=100, method="inclusive")
    return {"p50": round(q[49], 1), "p95": round(q[94], 1), "max": round(ms[-1], 1)}


def confinement_fields(user: str, image: Path | None) -> dict[str, Any]:
    """The launch fields of a confined run: the user, limits, and the image with its digest."""
    fields: dict[str, Any] = {"run_as": user, "cpus": 1.0, "mem_bytes": 1 << 30} if user else {}
    if image is not None:
        import hashlib

        digest = hashlib.sha256(image.read_bytes()).hexdigest()
        fields.update(image="bench", image_uri=str(image.resolve()), image_digest=f"sha256:{digest}")
    return fields


def node_user_url(url: str, node: str, report_queue: str) -> str:
    """Create ``node``'s own Redis user (``cluster.broker_acl``'s rules, reporting to ``report_queue``)
    on the broker at ``url``, with a throwaway secret; the URL its agent connects with."""
    import redis

    secret = uuid.uuid4().hex
    client = redis.Redis.from_url(url)
    client.execute_command("ACL", "SETUSER", *broker_acl.setuser_args(secret, node, report_queue))
    client.close()
    return broker_acl.node_url(url, secret, node)


def run(url: str, samples: int, user: str = "", image: Path | None = None, node_user: bool = False) -> dict[str, Any]:
    node = f"bench-{uuid.uuid4().hex[:8]}"
    app = Celery("agent-bench", broker=url, set_as_current=False)
    report_queue = f"reports.{node}"  # its own queue: nothing else can take its reports
    reports = Reports(url, node, report_queue)
    agent_url = node_user_url(url, node, report_queue) if node_user else url
    with tempfile.TemporaryDirectory() as workdir:
        os.chmod(workdir, 0o711)  # a confined job's user passes through to its own directories
        env = {k: v for k, v in os.environ.items() if k not in ("CELERY_BROKER_URL", "REDIS_URL")}
        agent = subprocess.Popen(
            [sys.executable, "-m", "cluster.agent", "--name", node, "--gpus", "1", "--broker", agent_url,
             "--workdir", workdir, "--heartbeat", "5", *([] if user else ["--single-user"]),
             "--report-queue", report_queue, "--log-level", os.environ.get("AGENT_LOG_LEVEL", "WARNING")],
            cwd=REPO, env=env,
        )
        try:
            reports.wait(protocol.REPORT_REGISTER)
            launch, launch_seen, stop, stop_seen = [], [], [], []
            fields = confinement_fields(user, image)
            cold = None
            for i in range(-1 if image is not None else 0, samples):
                cmd = protocol.LaunchCommand(job_id=f"b{i}", attempt=1, command="exec sleep 60", gpu_indices=[0],
                                             grace_period=10, **fields)
                t0 = time.time()
                app.send_task(protocol.AGENT_LAUNCH, kwargs=cmd.to_kwargs(), queue=protocol.node_queue(node))
                started, seen = reports.wait(protocol.REPORT_STARTED, job_id=f"b{i}")
                launch.append(started["started_at"] - t0)
                launch_seen.append(seen - t0)
                t1 = time.time()
                app.send_task(protocol.AGENT_PREEMPT, kwargs={"job_id": f"b{i}", "attempt": 1, "grace_period": 10},
                              queue=protocol.node_queue(node))
                exited, seen = reports.wait(protocol.REPORT_EXITED, job_id=f"b{i}")
                if i < 0:  # the image's first launch: unpacked here
                    cold = launch.pop(), launch_seen.pop()
                    continue
                stop.append(exited["ended_at"] - t1)
                stop_seen.append(seen - t1)
        finally:
            agent.terminate()
            agent.wait(timeout=60)
            reports.conn.release()
            import redis

            client = redis.Redis.from_url(url)
            for name in (report_queue, protocol.node_queue(node)):
                client.delete(name, f"_kombu.binding.{name}", f"_kombu.binding_permanent.{name}")
            client.delete(*broker_acl.unacked_keys(node).values())
            if node_user:
                client.execute_command("ACL", "DELUSER", broker_acl.user_name(node))
            client.close()
    return {
        "samples": samples,
        "node_user": node_user,
        "confined_as": user or None,
        "image": str(image) if image is not None else None,
        "image_cold_launch_ms": round(cold[0] * 1000, 1) if cold else None,
        "launch_to_started_ms": percentiles(launch),
        "launch_to_started_report_ms": percentiles(launch_seen),
        "preempt_to_exited_ms": percentiles(stop),
        "preempt_to_exited_report_ms": percentiles(stop_seen),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--broker", default=os.environ.get("AGENT_TEST_REDIS_URL", "redis://127.0.0.1:6379/3"))
    p.add_argument("--samples", type=int, default=100)
    p.add_argument("--json", type=Path, help="write the results here")
    p.add_argument("--confined", metavar="USER", default="", help="run the agent as root confining jobs, each as USER")
    p.add_argument("--image", type=Path, help="with --confined: run every job in this root filesystem tarball")
    p.add_argument("--node-user", action="store_true",
                   help="the agent reaches Redis as a user of its own (manage.py broker_acl's rules; Redis 7)")
    args = p.parse_args()
    if args.samples < 2:
        p.error("--samples must be >= 2")
    if args.image is not None and not args.confined:
        p.error("--image needs --confined USER")
    result = run(args.broker, args.samples, args.confined, args.image, args.node_user)
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
