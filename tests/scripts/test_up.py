"""scripts/up.sh run for real: one node agent SIGKILLed under it is restarted by its supervisor
while the rest of the stack (web server, worker, beat, the other agent and the jobs) keeps running.

The stack runs on pytest-django's test database, a private redis-server and temp dirs (agent work
dirs, checkpoints, beat schedule), so it touches nothing a developer's own ``scripts/up.sh`` uses.
Every process it starts carries a marker in its environment, by which teardown finds and kills
whatever is left, whatever the test's outcome.
"""

from __future__ import annotations

import os
import signal
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import redis

from tests.adversarial.conftest import test_database_url  # noqa: F401 - fixture
from tests.adversarial.stack import free_port
from tests.support.livestack import wait_until
from tests.support.procs import RUN_MARKER, interruptible

pytestmark = [pytest.mark.e2e, pytest.mark.postgres, pytest.mark.redis]

ROOT = Path(__file__).resolve().parents[2]
WAIT = 120.0  # a guard against hanging, not a performance expectation


def marked_pids(marker: str) -> list[int]:
    """Processes whose environment carries ``RUN_MARKER=marker`` (this test's, and only those)."""
    wanted = f"{RUN_MARKER}={marker}".encode()
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if wanted in (proc / "environ").read_bytes().split(b"\0"):
                found.append(int(proc.name))
        except OSError:
            continue
    return found


def agent_pid(marker: str, name: str) -> int | None:
    """The pid of the live ``python -m cluster.agent --name NAME`` of this test, if any."""
    for pid in marked_pids(marker):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            state = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        if b"cluster.agent" in argv and name.encode() in argv and state not in (b"Z", b"X"):
            return pid
    return None


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


@pytest.fixture
def up_stack(tmp_path, private_redis, test_database_url, settings):  # noqa: ANN001, ANN201, F811
    """scripts/up.sh in the background on the test database and a private Redis; yields
    (process, log path, marker, port). Teardown: SIGINT (Ctrl-C), then SIGKILL to whatever is left."""
    settings.SCHEDULER_AUTORUN = False  # the stack's own beat schedules; nothing is sent from here
    marker = f"up-test-{tmp_path}"
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("CELERY_BROKER_URL", "PYTEST_CURRENT_TEST")}
    env.update({
        "DATABASE_URL": test_database_url, "REDIS_URL": private_redis.url, "HOST": "127.0.0.1",
        "PORT": str(port), "SECRET_KEY": "up-test-only-secret-key-not-for-deployment",
        "DJANGO_SETTINGS_MODULE": "portal.settings", "GPUSCHED_LOCAL_AGENTS": "2", "GPUSCHED_AGENT_GPUS": "1",
        "AGENT_WORKDIR": str(tmp_path / "agents"), "GPUSCHED_CHECKPOINT_ROOT": str(tmp_path / "checkpoints"),
        "BEAT_SCHEDULE_FILE": str(tmp_path / "beat-schedule"), "SCHEDULER_TICK_SECONDS": "0.5",
        "SCHEDULER_RESUME_OVERHEAD": "0", "WORKER_CONCURRENCY": "1", "STOP_TIMEOUT": "10",
        RUN_MARKER: marker,
    })
    log_path = tmp_path / "up.log"
    with open(log_path, "wb") as out:
        process = subprocess.Popen([str(ROOT / "scripts/up.sh")], cwd=ROOT, env=env, stdout=out,
                                   stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=interruptible)
    try:
        yield process, log_path, marker, port
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(timeout=WAIT)
            except subprocess.TimeoutExpired:
                pass
        for pid in marked_pids(marker):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_a_sigkilled_agent_is_restarted_and_the_rest_of_the_stack_keeps_running(up_stack, private_redis) -> None:  # noqa: ANN001
    from cluster.models import Node, NodeState
    from scheduler.models import Attempt, AttemptState, Job, JobState
    from tests.support.live_helpers import make_user, submit

    process, log_path, marker, port = up_stack

    def log() -> str:
        return log_path.read_text(errors="replace")

    wait_until(lambda: "Press Ctrl-C to stop everything" in log() or process.poll() is not None,
               "scripts/up.sh to start everything", timeout=WAIT)
    assert process.poll() is None, log()[-4000:]
    wait_until(lambda: Node.objects.filter(name__in=["local-1", "local-2"], state=NodeState.UP).count() == 2,
               "both local agents to register", timeout=WAIT)
    # Each agent reaches Redis as a user of its own (manage.py broker_acl), not as the server does.
    assert "Redis: a user of its own for each agent (local-1 local-2)" in log()
    users = {client["user"] for client in redis.Redis.from_url(private_redis.url).client_list()}
    assert {"gpusched-node-local-1", "gpusched-node-local-2", "default"} <= users

    job = submit(make_user("alice"), "survivor", command="sleep 8; echo finished", grace_period=1)
    wait_until(lambda: Attempt.objects.filter(job=job, state=AttemptState.RUNNING).exists(), "the job to run",
               timeout=WAIT)
    (node,) = Attempt.objects.get(job=job).gpu_allocation
    victim = agent_pid(marker, node)
    other = agent_pid(marker, "local-2" if node == "local-1" else "local-1")
    assert victim and other

    os.kill(victim, signal.SIGKILL)
    wait_until(lambda: f"Agent {node} exited (status 137); restarting it in 1s" in log(),
               "the supervisor to report the agent's death", timeout=WAIT)
    restarted = wait_until(lambda: agent_pid(marker, node), "the agent to be restarted", timeout=WAIT)
    assert restarted != victim
    wait_until(lambda: "re-adopting 1 attempt(s)" in log(), "the restarted agent to adopt the job", timeout=WAIT)

    # Nothing else was stopped: the same other agent, the portal answers, up.sh runs on.
    assert process.poll() is None
    assert "stopping the rest" not in log()
    assert agent_pid(marker, "local-2" if node == "local-1" else "local-1") == other
    assert answers(f"http://127.0.0.1:{port}/accounts/login/")
    wait_until(lambda: Job.objects.filter(pk=job.pk, state=JobState.COMPLETED).exists(), "the job to complete",
               timeout=WAIT)
    assert [a.state for a in Attempt.objects.filter(job=job)] == [AttemptState.COMPLETED]

    # Ctrl-C still stops everything, the restarted agent included.
    process.send_signal(signal.SIGINT)
    process.wait(timeout=WAIT)
    wait_until(lambda: agent_pid(marker, "local-1") is None and agent_pid(marker, "local-2") is None,
               "the agents to stop", timeout=WAIT)
