"""Faults injected into the real system: agents, Celery workers, Redis and PostgreSQL die or restart
while jobs run and are submitted; jobs misbehave at preemption; agent messages come twice or late.

Every test runs its own processes (tests/adversarial/stack.py) on the test database and a private
redis-server (the PostgreSQL test: a private PostgreSQL cluster too), with per-node agent tokens,
and ends by checking every job and every attempt:

* every job reached the expected final state, each with exactly one successful attempt, its last;
* no two attempts of a job overlap in time, in the database and in reality: every job process
  appends "<job> <attempt> <time>" to a shared ticks file ten times a second, so two attempts of
  one job that ran at the same time show as overlapping tick intervals;
* no GPU was ever given to two open attempts (allocation invariants now, attempt history per GPU).
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import time
from collections import defaultdict
from itertools import pairwise
from pathlib import Path

import pytest
import requests

from cluster.auth import node_token
from cluster.models import Node, NodeState
from portal.models import ApiToken
from scheduler.models import Attempt, AttemptState, Job, JobState
from tests.adversarial import stack as stack_module
from tests.conftest import unavailable
from tests.support.livestack import wait_until
from tests.support.live_helpers import allocation_problems, make_user, submit

pytestmark = [pytest.mark.e2e, pytest.mark.postgres, pytest.mark.redis]

SECRET = "fault-tests-agent-secret"
HEARTBEAT = 0.5
LOST_AFTER_HEARTBEATS = 4
SETTINGS = {
    "SCHEDULER_AUTORUN": "1",
    "SCHEDULER_TICK_SECONDS": "0.5",
    "SCHEDULER_RESUME_OVERHEAD": "0",
    "SCHEDULER_LOCK_TIMEOUT": "10",
    "AGENT_HEARTBEAT_SECONDS": str(HEARTBEAT),
    "NODE_LOST_HEARTBEATS": str(LOST_AFTER_HEARTBEATS),
    "GPUSCHED_AGENT_SECRET": SECRET,
}
# The agents' jobs kill themselves after 1 s without their agent, before the node is declared lost (2 s).
FENCE_AFTER = 1.0
WAIT = 180.0  # a guard against hanging, not a performance expectation


# --- helpers ------------------------------------------------------------------------------------


def ticking_command(ticks_file: Path, ticks: int) -> str:
    """A job that appends '<job> <attempt> <time>' ``ticks`` times, 0.1 s apart, then exits 0."""
    line = f'echo "$GPUSCHED_JOB_ID $GPUSCHED_ATTEMPT $(date +%s.%N)" >> {ticks_file}'
    return f"i=0; while [ $i -lt {ticks} ]; do {line}; sleep 0.1; i=$((i+1)); done"


def tick_intervals(ticks_file: Path) -> dict[tuple[int, int], tuple[float, float]]:
    spans: dict[tuple[int, int], list[float]] = {}
    if not ticks_file.exists():
        return {}
    for raw in ticks_file.read_text().splitlines():
        parts = raw.split()
        if len(parts) != 3:
            continue
        key = (int(parts[0]), int(parts[1]))
        t = float(parts[2])
        span = spans.setdefault(key, [t, t])
        span[0], span[1] = min(span[0], t), max(span[1], t)
    return {k: (a, b) for k, (a, b) in spans.items()}


def ran_twice(ticks_file: Path) -> list[str]:
    """Jobs two of whose attempts were running at the same time, seen from their own processes."""
    by_job: dict[int, list[tuple[float, float, int]]] = defaultdict(list)
    for (job, attempt), (first, last) in tick_intervals(ticks_file).items():
        by_job[job].append((first, last, attempt))
    problems = []
    for job, spans in by_job.items():
        spans.sort()
        for (a0, a1, an), (b0, b1, bn) in pairwise(spans):
            if b0 < a1:
                problems.append(f"job {job}: attempts {an} and {bn} both ran during {b0:.2f}-{min(a1, b1):.2f}")
    return problems


def attempt_overlaps() -> list[str]:
    """Attempts of one job, or on one GPU, whose [start, end] intervals overlap in the database.

    An attempt on several nodes frees each node's GPUs when that node reports its rank's end
    (cluster/settlement.py), and the database keeps only the attempt's end, that of its last rank: on
    a GPU it held, the next attempt may start before it, so there the check is only that it ended."""
    problems = []
    by_job: dict[int, list[Attempt]] = defaultdict(list)
    by_gpu: dict[tuple[str, int], list[Attempt]] = defaultdict(list)
    for a in Attempt.objects.order_by("started_at"):
        by_job[a.job_id].append(a)
        for node, indices in a.gpu_allocation.items():
            for index in indices:
                by_gpu[(node, index)].append(a)
    for label, groups in (("job", by_job), ("GPU", by_gpu)):
        for key, attempts in groups.items():
            for before, after in pairwise(attempts):
                ends_per_node = label == "GPU" and len(before.gpu_allocation) > 1
                if before.ended_at is None or (before.ended_at > after.started_at and not ends_per_node):
                    problems.append(f"{label} {key}: job {before.job_id}/{before.number} overlaps "
                                    f"job {after.job_id}/{after.number}")
    return problems


def assert_all_completed(job_ids: list[int]) -> None:
    """Every job COMPLETED, its last attempt the only COMPLETED one, every attempt final."""
    for job in Job.objects.filter(pk__in=job_ids):
        attempts = list(job.attempts.order_by("number"))
        assert job.state == JobState.COMPLETED, (job.pk, job.state, [(a.number, a.state) for a in attempts])
        assert [a.number for a in attempts] == list(range(1, job.attempt_count + 1))
        assert [a.state for a in attempts].count(AttemptState.COMPLETED) == 1
        assert attempts[-1].state == AttemptState.COMPLETED and attempts[-1].exit_code == 0
        assert all(a.ended_at is not None for a in attempts)
    assert Job.objects.filter(pk__in=job_ids).count() == len(job_ids)


def wait_all_final(job_ids: list[int], stack: stack_module.Stack, timeout: float = WAIT) -> None:
    from scheduler.models import TERMINAL_STATES

    try:
        wait_until(lambda: Job.objects.filter(pk__in=job_ids, state__in=TERMINAL_STATES).count() == len(job_ids),
                   f"all {len(job_ids)} jobs to finish", timeout=timeout, interval=0.25)
    except pytest.fail.Exception:
        stuck = [(j.pk, j.name, j.state, j.pending_reason, [(a.number, a.state, list(a.gpu_allocation))
                                                          for a in j.attempts.order_by("number")])
                 for j in Job.objects.filter(pk__in=job_ids).exclude(state__in=TERMINAL_STATES)]
        nodes = list(Node.objects.values_list("name", "state", "last_heartbeat"))
        pytest.fail(f"jobs not finished: {stuck}; nodes: {nodes}")


def start_agents(stack: stack_module.Stack, *specs: tuple[str, int]) -> list[str]:
    names = [name for name, _ in specs]
    for name, gpus in specs:
        stack.agent(name, gpus, heartbeat=HEARTBEAT, token=node_token(SECRET, name),
                    extra_args=("--fence-after", str(FENCE_AFTER)))
    wait_until(lambda: Node.objects.filter(name__in=names, state=NodeState.UP).count() == len(names),
               f"nodes {names} to register")
    return names


def on_node(job: Job) -> str:
    job.refresh_from_db()
    (node,) = Attempt.objects.get(job=job, number=job.attempt_count).gpu_allocation
    return node


@pytest.fixture
def stack(live_stack):  # noqa: ANN001, ANN201
    live_stack.settings.update(SETTINGS)
    return live_stack


def check_final(job_ids: list[int], ticks: Path) -> None:
    assert_all_completed(job_ids)
    assert ran_twice(ticks) == []
    assert attempt_overlaps() == []
    assert allocation_problems() == []


# --- agents ----------------------------------------------------------------------------------------


def test_a_machine_that_dies_with_its_jobs_has_them_requeued_and_finished_elsewhere(stack, tmp_path) -> None:
    """The agent and every job process of node a are SIGKILLed while four jobs run there and two on b."""
    stack.worker()
    a, b = start_agents(stack, ("a", 4), ("b", 4))
    alice = make_user("alice")
    ticks = tmp_path / "ticks"
    jobs = [submit(alice, f"j{i}", command=ticking_command(ticks, 60), grace_period=1) for i in range(6)]
    wait_until(lambda: Job.objects.filter(state=JobState.RUNNING).count() == 6, "six jobs to run")
    victims = [j for j in jobs if on_node(j) == a]
    assert victims
    wait_until(lambda: len(tick_intervals(ticks)) == 6, "every job to tick")

    stack.procs[a].kill()
    assert stack.kill_jobs(a)
    wait_until(lambda: Node.objects.filter(name=a, state=NodeState.NODE_LOST).exists(), "node a to be lost")
    wait_all_final([j.pk for j in jobs], stack)

    check_final([j.pk for j in jobs], ticks)
    for job in victims:
        first, second = Attempt.objects.filter(job=job).order_by("number")
        assert first.state == AttemptState.NODE_LOST and list(first.gpu_allocation) == [a]
        assert list(second.gpu_allocation) == [b]
    for job in set(jobs) - set(victims):
        assert Attempt.objects.filter(job=job).count() == 1


def test_a_sigkilled_agent_s_orphaned_jobs_never_run_alongside_their_requeued_attempts(stack, tmp_path) -> None:
    """Only the agent of node a is SIGKILLed: its job processes live on, unsupervised. The server
    declares the node lost and restarts the jobs on b; the orphans must be gone by then."""
    stack.worker()
    a, b = start_agents(stack, ("a", 2), ("b", 2))
    alice = make_user("alice")
    ticks = tmp_path / "ticks"
    jobs = [submit(alice, f"j{i}", command=ticking_command(ticks, 50), grace_period=1) for i in range(2)]
    wait_until(lambda: Job.objects.filter(state=JobState.RUNNING).count() == 2, "two jobs to run")
    wait_until(lambda: len(tick_intervals(ticks)) == 2, "both jobs to tick")
    moved = [j for j in jobs if on_node(j) == a]
    assert moved

    stack.procs[a].kill()
    wait_until(lambda: Node.objects.filter(name=a, state=NodeState.NODE_LOST).exists(), "node a to be lost")
    wait_all_final([j.pk for j in jobs], stack)
    check_final([j.pk for j in jobs], ticks)
    stack.kill_jobs(a)


# --- workers and the scheduling loop -----------------------------------------------------------------


def test_a_worker_sigkilled_again_and_again_mid_cycle_loses_or_doubles_nothing(stack, tmp_path) -> None:
    """While 40 short jobs flow through two agents, the Celery worker running the loop is SIGKILLed
    (with its pool) five times at random moments and restarted."""
    stack.settings["SCHEDULER_LOCK_TIMEOUT"] = "2"  # a dead worker's lock lapses soon
    stack.worker()
    start_agents(stack, ("a", 3), ("b", 3))
    alice = make_user("alice")
    ticks = tmp_path / "ticks"
    jobs = [submit(alice, f"j{i}", command=ticking_command(ticks, 3), grace_period=1,
                   num_gpus=random.Random(i).choice([1, 1, 2])) for i in range(40)]
    rng = random.Random(5)
    for _ in range(5):
        time.sleep(rng.uniform(0.5, 2.0))
        stack.procs["worker"].kill()
        time.sleep(rng.uniform(0.0, 1.0))
        stack.worker()
    wait_all_final([j.pk for j in jobs], stack)
    check_final([j.pk for j in jobs], ticks)


def test_cycles_running_at_once_for_a_long_series_never_double_allocate(stack, tmp_path) -> None:
    """Two workers of two processes each, with a scheduling lock that lapses after 10 ms, so cycles
    overlap all the time, while 80 short jobs of 1-3 GPUs flow through three agents."""
    stack.settings.update({"SCHEDULER_LOCK_TIMEOUT": "0.01", "SCHEDULER_TICK_SECONDS": "0.2"})
    stack.worker("worker1")
    stack.worker("worker2", beat=False)
    start_agents(stack, ("a", 4), ("b", 4), ("c", 2))
    users = [make_user(f"u{i}") for i in range(3)]
    ticks = tmp_path / "ticks"
    rng = random.Random(11)
    jobs = []
    for i in range(80):
        jobs.append(submit(rng.choice(users), f"j{i}", command=ticking_command(ticks, rng.choice([2, 4, 8])),
                           num_gpus=rng.choice([1, 1, 2, 3]), grace_period=1))
        if i % 10 == 9:
            time.sleep(0.3)
    wait_all_final([j.pk for j in jobs], stack, timeout=300)
    check_final([j.pk for j in jobs], ticks)
    logs = stack.procs["worker1"].output() + stack.procs["worker2"].output()
    assert "scheduling lock expired" in logs  # cycles did outlive the lock, so they overlapped
    for job in jobs:
        assert Attempt.objects.filter(job=job).count() == 1  # nothing preempted or lost: one start each


# --- Redis and PostgreSQL restarts -------------------------------------------------------------------


def _api_submit(base_url: str, key: str, name: str, command: str, tries: int = 1) -> int | None:
    """POST one job; its id on 201, None when the portal refused or could not be reached."""
    try:
        response = requests.post(f"{base_url}/api/v1/jobs/", json={"name": name, "command": command,
                                                                    "grace_period": 1},
                                  headers={"Authorization": f"Token {key}"}, timeout=30)
    except requests.RequestException:
        return None
    return response.json()["id"] if response.status_code == 201 else None


@pytest.mark.persistent_redis
def test_redis_restarted_while_jobs_run_and_are_submitted(stack, private_redis, tmp_path) -> None:
    """Jobs are submitted through the REST API before, during and after a restart of Redis (with its
    append-only file, as docs/operations.md asks of production, so queued messages survive). The
    portal keeps accepting jobs, the agents reconnect, the worker reconnects or (kombu may crash
    on a lost connection with unacknowledged messages) is restarted by its supervisor, and every
    accepted job completes once."""
    stack.portal()
    stack.worker()
    stack.supervise("worker", stack.worker)
    start_agents(stack, ("a", 3), ("b", 3))
    key = ApiToken.issue(make_user("alice"), "faults")[1]
    ticks = tmp_path / "ticks"
    accepted = []
    for i in range(8):
        accepted.append(_api_submit(stack.base_url, key, f"before{i}", ticking_command(ticks, 20)))
    wait_until(lambda: Job.objects.filter(state=JobState.RUNNING).count() >= 4, "jobs to run")

    private_redis.stop()
    for i in range(4):
        accepted.append(_api_submit(stack.base_url, key, f"during{i}", ticking_command(ticks, 10)))
    time.sleep(2 * HEARTBEAT * LOST_AFTER_HEARTBEATS)  # longer than the node-lost delay
    private_redis.start()
    for i in range(4):
        accepted.append(_api_submit(stack.base_url, key, f"after{i}", ticking_command(ticks, 10)))

    assert None not in accepted  # the portal never refused a submission
    wait_all_final(accepted, stack)
    check_final(accepted, ticks)


@pytest.fixture
def private_postgres(tmp_path):  # noqa: ANN001, ANN201
    try:
        server = stack_module.PostgresServer(tmp_path).init()
    except stack_module.ServiceUnavailable as exc:
        unavailable(str(exc))
    yield server
    server.close()


def test_postgresql_restarted_while_jobs_run_and_are_submitted(private_postgres, private_redis, tmp_path,
                                                              request) -> None:
    """The whole system on a private PostgreSQL, which is restarted (fast shutdown: connections cut)
    while jobs run and are submitted. Submissions during the outage are refused with a 5xx and never
    half-stored; every accepted job completes once. State is read back through the API."""
    database_url = private_postgres.create_database("faults")
    stack = stack_module.Stack(tmp_path, database_url, private_redis.url, settings=dict(SETTINGS))
    try:
        stack.migrate()
        key = subprocess.run([stack_module.PY, "manage.py", "shell", "-c",
                              "from django.contrib.auth.models import User; from portal.models import ApiToken; "
                              "print(ApiToken.issue(User.objects.create_user('alice'), 'faults')[1])"],
                             cwd=stack_module.REPO, env=stack.env(), check=True, capture_output=True, text=True,
                             timeout=120).stdout.strip().splitlines()[-1]
        stack.portal()
        stack.worker()
        stack.supervise("worker", stack.worker)
        for name, gpus in (("a", 3), ("b", 3)):
            stack.agent(name, gpus, heartbeat=HEARTBEAT, token=node_token(SECRET, name),
                        extra_args=("--fence-after", str(FENCE_AFTER)))
        api = requests.Session()
        api.headers["Authorization"] = f"Token {key}"

        def nodes_up() -> bool:
            nodes = api.get(f"{stack.base_url}/api/v1/nodes/", timeout=10).json()
            return sorted(n["name"] for n in nodes if n["state"] == "UP") == ["a", "b"]

        wait_until(nodes_up, "both nodes to register")
        ticks = tmp_path / "ticks"
        accepted = [_api_submit(stack.base_url, key, f"before{i}", ticking_command(ticks, 20)) for i in range(6)]
        assert None not in accepted

        def jobs() -> list[dict]:
            out, url = [], f"{stack.base_url}/api/v1/jobs/?page_size=100"
            while url:
                page = api.get(url, timeout=10).json()
                out.extend(page["results"])
                url = page["next"]
            return out

        wait_until(lambda: sum(j["state"] == "RUNNING" for j in jobs()) >= 4, "jobs to run")
        private_postgres.stop("fast")
        refused = 0
        for i in range(3):
            job_id = _api_submit(stack.base_url, key, f"during{i}", ticking_command(ticks, 10))
            refused += job_id is None
        time.sleep(2.0)
        private_postgres.start()
        assert refused == 3
        accepted += [_api_submit(stack.base_url, key, f"after{i}", ticking_command(ticks, 10)) for i in range(3)]
        assert None not in accepted

        final = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"}
        wait_until(lambda: {j["id"] for j in jobs() if j["state"] in final} >= set(accepted),
                   "every accepted job to finish", timeout=WAIT)
        listing = jobs()
        assert sorted(j["id"] for j in listing) == sorted(accepted)  # nothing half-stored from the outage
        for job in listing:
            attempts = job["attempts"]
            assert job["state"] == "COMPLETED", json.dumps(job)[:800]
            assert [a["outcome"] for a in attempts].count("COMPLETED") == 1 and attempts[-1]["outcome"] == "COMPLETED"
        assert ran_twice(ticks) == []
    except BaseException:
        import sys

        sys.stderr.write(stack.diagnostics())
        raise
    finally:
        stack.stop_all()
        stack.kill_jobs()
        assert not stack.job_groups()


# --- jobs at preemption -------------------------------------------------------------------------------


def test_grace_period_a_job_ignoring_sigterm_is_killed_at_its_end_one_exiting_in_it_is_checkpointed(
        stack, tmp_path) -> None:
    """Two 1-GPU nodes run two BE jobs; a TE job arrives and one of them is preempted; then a second
    TE job preempts the other. The one that ignores SIGTERM is SIGKILLed when its 3 s grace period
    ends (not checkpointed, its work lost); the one that exits on SIGTERM is checkpointed."""
    stack.worker()
    start_agents(stack, ("a", 1), ("b", 1))
    alice = make_user("alice")
    stubborn = submit(alice, "stubborn", command="trap '' TERM; i=0; while [ $i -lt 3000 ]; do sleep 0.1; "
                                                 "i=$((i+1)); done", grace_period=3)
    polite = submit(alice, "polite", command="trap 'echo saved; exit 0' TERM; sleep 300 & wait", grace_period=30)
    wait_until(lambda: Job.objects.filter(state=JobState.RUNNING).count() == 2, "both BE jobs to run")
    time.sleep(1.0)
    # Each TE job holds its GPU until cancelled, so the second one must preempt the other BE job.
    te_jobs = []
    for i in range(2):
        te_jobs.append(submit(alice, f"te{i}", job_class="TE", command="sleep 300", grace_period=1))
        wait_until(lambda: Attempt.objects.filter(job__in=[stubborn, polite], number=1,
                                                  state=AttemptState.PREEMPTED).count() == i + 1,
                   f"BE job {i + 1} to be preempted and gone")

    killed = Attempt.objects.get(job=stubborn, number=1)
    assert killed.state == AttemptState.PREEMPTED
    assert killed.signal == signal.SIGKILL and killed.exit_code is None
    assert killed.checkpointed is False and killed.lost_gpu_seconds > 0
    waited = (killed.vacated_at - killed.notice_at).total_seconds()
    assert waited >= 3.0  # the whole grace period was given before SIGKILL
    saved = Attempt.objects.get(job=polite, number=1)
    assert saved.state == AttemptState.PREEMPTED
    assert saved.checkpointed is True and saved.lost_gpu_seconds == 0.0 and saved.exit_code == 0
    assert (saved.vacated_at - saved.notice_at).total_seconds() < 30
    for job in (stubborn, polite):
        job.refresh_from_db()
        assert job.preemption_count == 1 and job.state == JobState.PENDING
    assert attempt_overlaps() == [] and allocation_problems() == []
    from scheduler.services import cancel_job

    for job in [*te_jobs, stubborn, polite]:
        cancel_job(job, alice)
    wait_until(lambda: Job.objects.filter(state=JobState.CANCELLED).count() == 4, "every job to be cancelled")


# --- duplicated and late agent messages through the broker ---------------------------------------------


def test_duplicated_and_late_agent_reports_change_nothing(stack, tmp_path) -> None:
    """A job runs on a, is preempted, runs again and completes. Then every kind of report about it is
    delivered again through the broker, as the agent of a (right token): its STARTED and EXITED of
    both attempts (duplicates and late ones about an old attempt), a stale heartbeat, log lines of
    an old attempt. The job, its attempts, GPUs and events stay exactly as they were."""
    from celery import Celery

    from cluster import protocol

    stack.worker()
    (a,) = start_agents(stack, ("a", 1))
    alice = make_user("alice")
    job = submit(alice, "j", command="trap 'exit 0' TERM; sleep 2 & wait", grace_period=5)
    wait_until(lambda: Job.objects.filter(pk=job.pk, state=JobState.RUNNING).exists(), "the job to run")
    te = submit(alice, "te", job_class="TE", command="true", grace_period=1)
    wait_until(lambda: Job.objects.filter(pk=job.pk, state=JobState.COMPLETED).exists(), "the job to complete")
    wait_until(lambda: Job.objects.filter(pk=te.pk, state=JobState.COMPLETED).exists(), "the TE job to complete")
    assert Attempt.objects.filter(job=job).count() == 2

    def state() -> object:
        job.refresh_from_db()
        return (job.state, job.attempt_count, job.preemption_count, job.progress_seconds, job.exit_code,
                [(a.number, a.state, a.exit_code, a.checkpointed, a.ended_at, a.lost_gpu_seconds)
                 for a in job.attempts.order_by("number")],
                list(job.events.values_list("from_state", "to_state")),
                list(job.gpus.all()), Node.objects.get(name=a).state)

    before = state()
    app = Celery(broker=stack.redis_url)
    token = node_token(SECRET, a)
    now = time.time()
    for attempt in (1, 2):
        for _ in range(2):
            app.send_task(protocol.REPORT_STARTED, kwargs={"node": a, "job_id": job.pk, "attempt": attempt,
                                                           "pid": 99999, "started_at": now, "token": token})
            app.send_task(protocol.REPORT_EXITED, kwargs={
                "node": a, "job_id": job.pk, "attempt": attempt, "exit_code": 1, "signal": None, "ended_at": now,
                "notice_at": now, "checkpointed": False, "reason": None, "token": token})
    app.send_task(protocol.REPORT_LOG, kwargs={"node": a, "job_id": job.pk, "attempt": 1, "lines": ["late"],
                                               "token": token})
    app.send_task(protocol.REPORT_HEARTBEAT, kwargs={"node": a, "running": [[job.pk, 1]], "sent_at": now - 3600,
                                                     "token": token})
    # a report under another node's name with a's token: refused outright
    app.send_task(protocol.REPORT_EXITED, kwargs={
        "node": "b", "job_id": te.pk, "attempt": 1, "exit_code": 1, "signal": None, "ended_at": now,
        "notice_at": None, "checkpointed": False, "reason": None, "token": token})
    wait_until(lambda: stack.procs["worker"].output().count("refused: wrong or missing agent token") >= 1,
               "the forged report to be refused")
    wait_until(lambda: stack.procs["worker"].output().count("cluster.started") >= 6, "the replays to be handled")
    time.sleep(1.0)
    assert state() == before
    assert Job.objects.get(pk=te.pk).state == JobState.COMPLETED
    assert allocation_problems() == []


# --- agent reports in flight when their worker dies ------------------------------------------------------
#
# The test holds the job's row lock, so the worker handling the job's exit report waits on it inside
# its transaction: the report is provably in the middle of being handled when the worker (or only the
# pool process running it) is SIGKILLed. Node loss and the "attempt no longer listed" verdict are put
# far off (10 s and 20 s), so that only the report itself can settle the attempt in time. A message
# held longer than the broker's visibility timeout is delivered again even though its worker lives:
# the tests where only a pool process dies (handed back at once) set it far beyond their duration.

# The reports wait on the held row as long as it is held (no SCHEDULER_ROW_LOCK_WAIT, which would fail
# them after a second and retry them as new messages): the kills must find them mid-handling.
IN_FLIGHT_SETTINGS = {"NODE_LOST_HEARTBEATS": "20", "SCHEDULER_ROW_LOCK_WAIT": "0"}


def _hold_job_row(database_url: str, job_id: int):  # noqa: ANN202 - a psycopg connection
    import psycopg

    conn = psycopg.connect(database_url)
    conn.execute("SELECT id FROM scheduler_job WHERE id = %s FOR UPDATE", (job_id,))
    return conn


def _port_of(url: str) -> int:
    from urllib.parse import urlsplit

    port = urlsplit(url).port
    assert port is not None, url
    return port


def _waiting_on(holder, seen: set[int]) -> tuple[int, int] | None:  # noqa: ANN001
    """(backend pid, client port) of a new backend waiting for ``holder``'s lock on the job row (nothing
    but the report under test locks that row while the test holds it: the job is not started, preempted
    or cancelled meanwhile).
    Waiters queue behind one another (the second waits for the first's tuple lock), hence the closure."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pid, client_port, pg_blocking_pids(pid) FROM pg_stat_activity "
                       "WHERE wait_event_type = 'Lock'")
        waiting = {pid: (port, set(blockers)) for pid, port, blockers in cursor.fetchall()}
    behind = {holder.info.backend_pid}
    grew = True
    while grew:
        grew = False
        for pid, (_, blockers) in waiting.items():
            if pid not in behind and blockers & behind:
                behind.add(pid)
                grew = True
    for pid in sorted(behind - {holder.info.backend_pid} - seen):
        return pid, waiting[pid][0]
    return None


def _process_with_local_port(port: int, server_port: int) -> int:
    """The pid of the process owning the TCP connection from local port ``port`` to ``server_port``
    (from /proc). The server's port must match too: another process (a test run alongside, with its
    own database connections) may use the same local port towards another server."""
    import os

    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for row in Path(table).read_text().splitlines()[1:]:
            fields = row.split()
            local, remote = (int(f.rsplit(":", 1)[1], 16) for f in fields[1:3])
            if (local, remote) == (port, server_port):
                inodes.add(f"socket:[{fields[9]}]")
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            for fd in (proc / "fd").iterdir():
                if os.readlink(fd) in inodes:
                    return int(proc.name)
        except OSError:
            continue
    raise AssertionError(f"no process owns a connection from local port {port} to port {server_port}")


def _job_waiting_for_its_exit(stack: stack_module.Stack, tmp_path: Path, visibility_timeout: float) -> tuple[Job, Path]:
    """One job running on node a that exits 0 once the returned file exists."""
    stack.settings.update(IN_FLIGHT_SETTINGS, BROKER_VISIBILITY_TIMEOUT=str(visibility_timeout))
    stack.worker()
    start_agents(stack, ("a", 1))
    go = tmp_path / "go"
    job = submit(make_user("alice"), "j", command=f"while [ ! -e {go} ]; do sleep 0.05; done", grace_period=1)
    wait_until(lambda: Attempt.objects.filter(job=job, number=1, state=AttemptState.RUNNING).exists(),
               "the job to run")
    return job, go


def _assert_completed_once(job: Job) -> None:
    wait_until(lambda: Job.objects.filter(pk=job.pk, state__in=[JobState.COMPLETED, JobState.FAILED]).exists(),
               "the job to finish", timeout=WAIT)
    job.refresh_from_db()
    attempts = [(a.number, a.state, a.exit_code) for a in job.attempts.order_by("number")]
    assert (job.state, attempts) == (JobState.COMPLETED, [(1, AttemptState.COMPLETED, 0)])
    assert allocation_problems() == []


def test_an_exit_report_whose_worker_is_sigkilled_while_handling_it_is_handled_by_the_next_worker(
        stack, tmp_path) -> None:
    """The whole worker (main process, pool and beat) is SIGKILLed while its pool waits inside the
    exit report's transaction. The report was never acknowledged, so the restarted worker gets it
    again and the attempt completes: the job does not run a second time."""
    job, go = _job_waiting_for_its_exit(stack, tmp_path, visibility_timeout=2)
    holder = _hold_job_row(stack.database_url, job.pk)
    try:
        go.touch()
        wait_until(lambda: _waiting_on(holder, set()), "the exit report to be handled")
        stack.procs["worker"].kill()
    finally:
        holder.close()
    stack.worker()
    _assert_completed_once(job)
    # Whether the redelivered report or, had it come later than twice the node-lost delay, the exit
    # repeated by the heartbeats ended the attempt, the report is handled by the next worker.
    wait_until(lambda: "cluster.exited" in stack.procs["worker"].output(), "the report to be delivered again")


def test_an_exit_report_whose_pool_process_dies_while_handling_it_is_handled_again(stack, tmp_path) -> None:
    """Only the pool process handling the exit report is SIGKILLed (as the OOM killer would); the
    worker lives on, gives the report back to the queue and a new pool process handles it."""
    job, go = _job_waiting_for_its_exit(stack, tmp_path, visibility_timeout=3600)
    holder = _hold_job_row(stack.database_url, job.pk)
    try:
        go.touch()
        _, port = wait_until(lambda: _waiting_on(holder, set()), "the exit report to be handled")
        pool_process = _process_with_local_port(port, _port_of(stack.database_url))
        assert pool_process != stack.procs["worker"].process.pid
        os_kill(pool_process)
    finally:
        holder.close()
    _assert_completed_once(job)
    assert stack.procs["worker"].alive()


def test_an_exit_report_that_kills_its_pool_process_every_time_is_dropped_after_a_few_deliveries(
        stack, tmp_path) -> None:
    """Each time a pool process handles the exit report it is SIGKILLed. After the first delivery and
    MAX_REDELIVERIES more, the worker drops the report instead of dying on it for ever; the attempt
    is then ended by the heartbeats' verdict (no longer listed), as the exit they repeat says: the job
    completed, and does not run again."""
    job, go = _job_waiting_for_its_exit(stack, tmp_path, visibility_timeout=3600)
    holder = _hold_job_row(stack.database_url, job.pk)
    try:
        go.touch()
        seen = _kill_each_delivery_until_dropped(stack, holder, "cluster.exited")
        assert _waiting_on(holder, seen) is None
    finally:
        holder.close()
    _assert_completed_once(job)
    assert "its exit report has not arrived; ending it as its heartbeats report it ended (exit code 0" in (
        stack.procs["worker"].output())
    assert stack.procs["worker"].alive()


def test_a_start_report_dropped_after_a_few_deliveries_comes_again_for_the_resent_launch(stack, tmp_path) -> None:
    """The start report's handler is SIGKILLed on every delivery until the worker drops it, so the
    job is still STARTING in the database while it runs. The tick re-sends the launch it has not heard
    started; the agent starts nothing new and reports the same start again, and the job shows RUNNING."""
    stack.settings.update(IN_FLIGHT_SETTINGS, BROKER_VISIBILITY_TIMEOUT="3600")
    stack.worker()
    start_agents(stack, ("a", 1))
    agent = stack.procs["a"].process.pid
    go = tmp_path / "go"
    os_kill(agent, signal.SIGSTOP)  # the launch waits in its queue while the test takes the lock
    try:
        job = submit(make_user("alice"), "j", command=f"while [ ! -e {go} ]; do sleep 0.05; done", grace_period=1)
        wait_until(lambda: Attempt.objects.filter(job=job, number=1, state=AttemptState.STARTING).exists(),
                   "the job to be started")
        holder = _hold_job_row(stack.database_url, job.pk)
    finally:
        os_kill(agent, signal.SIGCONT)
    try:
        _kill_each_delivery_until_dropped(stack, holder, "cluster.started")
        assert Attempt.objects.get(job=job, number=1).state == AttemptState.STARTING
    finally:
        holder.close()
    wait_until(lambda: Attempt.objects.filter(job=job, number=1, state=AttemptState.RUNNING).exists(),
               "the start to be reported again", timeout=WAIT)
    assert "already running; its start is reported again" in stack.procs["a"].output()
    job.refresh_from_db()
    assert job.state == JobState.RUNNING
    go.touch()
    _assert_completed_once(job)


def _kill_each_delivery_until_dropped(stack: stack_module.Stack, holder, task: str) -> set[int]:  # noqa: ANN001
    """SIGKILL the pool process handling a node-a ``task`` report (waiting on ``holder``'s lock) at each
    delivery, until the worker drops one; returns the backends that waited.

    A report sent again meanwhile (the tick re-sends a launch it has not heard started, and the agent
    reports the start again) is killed in the same way: each kill counts towards some report's limit,
    so one is dropped after at most ``MAX_REDELIVERIES + 1`` kills per report, whichever the order."""
    from cluster.tasks import MAX_REDELIVERIES

    dropped = f"{task} from node 'a' dropped: delivered again"
    seen: set[int] = set()

    def dropped_or_waiting() -> bool | tuple[int, int] | None:
        return dropped in stack.procs["worker"].output() or _waiting_on(holder, seen)

    while (waiting := wait_until(dropped_or_waiting, f"the {task} report to be delivered or dropped")) is not True:
        backend, port = waiting
        seen.add(backend)
        assert len(seen) <= 10 * (MAX_REDELIVERIES + 1), f"no {task} report dropped after {len(seen) - 1} kills"
        os_kill(_process_with_local_port(port, _port_of(stack.database_url)))
    return seen


def os_kill(pid: int, sig: int = signal.SIGKILL) -> None:
    import os

    os.kill(pid, sig)
