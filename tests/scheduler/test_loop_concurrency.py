"""Two scheduling loops at once on PostgreSQL, without the lock, never double-allocate.

Two threads run cycles in lock step (a barrier makes them read the same state
and race to apply the same decisions) until at least 40 attempts and two
preemptions have happened, while a third thread plays the node
agents: it consumes the commands both loops send, reports starts and exits
through the real services, and sometimes cancels a job or submits a TE job
that forces preemptions. The simulated agents check every launch against the
GPUs they are running, which catches a double allocation the moment it is
sent; at the end the database invariants and each GPU's attempt history are
checked as well.
"""

from __future__ import annotations

import random
import threading
from collections import defaultdict
from itertools import pairwise

import pytest
from django.db import connections
from django.utils import timezone

from cluster import protocol, reports
from scheduler import loop
from scheduler import services as job_services
from scheduler.models import ACTIVE_STATES, Attempt, Job, JobState
from tests.support.live_helpers import SentCommands, allocation_problems, make_node, make_user, submit

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]

# The run goes on until this much has happened (whatever the machine's speed)...
TARGET_ATTEMPTS = 40
TARGET_PREEMPTIONS = 2
# ...or until this many rounds, a guard against a run that never gets there.
MAX_ROUNDS = 2000


class FakeAgents:
    """Node agents reduced to bookkeeping: which attempt holds each GPU."""

    def __init__(self, sent: SentCommands, seed: int) -> None:
        self.sent = sent
        self.seen = 0
        self.rng = random.Random(seed)
        self.gpus: dict[tuple[str, int], tuple[int, int]] = {}
        self.running: dict[tuple[int, int], dict[str, list[int]]] = defaultdict(dict)
        self.violations: list[str] = []

    def pump(self) -> None:
        while self.seen < len(self.sent.items):
            node, task, kw = self.sent.items[self.seen]
            self.seen += 1
            key = (kw.get("job_id"), kw.get("attempt"))
            if task == protocol.AGENT_LAUNCH:
                self.launch(node, key, kw["gpu_indices"])
            elif task == protocol.AGENT_PREEMPT:
                self.exit(node, key, protocol.EXIT_PREEMPT, 143)
            elif task == protocol.AGENT_KILL:
                self.exit(node, key, kw["reason"], None)

    def launch(self, node: str, key: tuple[int, int], indices: list[int]) -> None:
        if node in self.running.get(key, {}):
            return  # a repeated launch
        for index in indices:
            owner = self.gpus.get((node, index))
            if owner is not None:
                self.violations.append(f"launch of {key} on {node}:{index}, which {owner} is running on")
            self.gpus[(node, index)] = key
        self.running[key][node] = indices
        now = timezone.now()
        reports.attempt_started(node, key[0], key[1], 1000 + key[0], now)

    def exit(self, node: str, key: tuple[int, int], reason: str | None, code: int | None) -> None:
        indices = self.running.get(key, {}).pop(node, None)
        if indices is None:
            return  # not running here: agents ignore it
        if not self.running[key]:
            del self.running[key]
        for index in indices:
            del self.gpus[(node, index)]
        now = timezone.now()
        reports.attempt_exited(node, key[0], key[1], exit_code=code, signal=None, ended_at=now,
                                notice_at=now if reason else None, checkpointed=reason == protocol.EXIT_PREEMPT,
                                reason=reason, now=now)

    def finish_some(self, te_jobs: set[int]) -> None:
        """End some running jobs: TE jobs are short, BE jobs long (so TE jobs find a full cluster)."""
        for key in list(self.running):
            if self.rng.random() < (0.5 if key[0] in te_jobs else 0.1):
                for node in list(self.running.get(key, {})):
                    self.exit(node, key, None, 0)


class LockStep:
    """Two loop threads that cycle in lock step until the main thread has seen enough.

    The barrier's action (run once per round, before either thread goes on)
    reads the stop request, so both threads see the same answer in a round.
    """

    def __init__(self) -> None:
        self.stop_requested = threading.Event()
        self.stopping = False
        self.barrier = threading.Barrier(2, action=self._round)
        self.skipped: list[tuple[str, str]] = []
        self.errors: list[Exception] = []
        self.rounds = 0

    def _round(self) -> None:
        self.stopping = self.stop_requested.is_set() or self.rounds >= MAX_ROUNDS
        self.rounds += 1

    def run(self) -> None:
        try:
            while True:
                self.barrier.wait(timeout=120)
                if self.stopping:
                    return
                self.skipped.extend(loop.run_cycle().applied.skipped)
        except Exception as exc:  # reported by the main thread
            self.errors.append(exc)
            self.barrier.abort()
        finally:
            connections.close_all()


def _gpu_history_overlaps() -> list[str]:
    """Attempts that used one GPU during overlapping intervals (start to end)."""
    uses: dict[tuple[str, int], list[tuple[object, object, int, int]]] = defaultdict(list)
    for a in Attempt.objects.all():
        for node, indices in a.gpu_allocation.items():
            for index in indices:
                uses[(node, index)].append((a.started_at, a.ended_at, a.job_id, a.number))
    problems = []
    for gpu, runs in uses.items():
        runs.sort(key=lambda r: r[0])
        for before, after in pairwise(runs):
            if before[1] is None or before[1] > after[0]:
                problems.append(f"GPU {gpu}: job {before[2]}/{before[3]} overlaps job {after[2]}/{after[3]}")
    return problems


def test_two_loops_at_once_never_double_allocate(sent) -> None:
    rng = random.Random(7)
    for name in ("n1", "n2", "n3"):
        make_node(name, 4)
    users = [make_user(f"u{i}") for i in range(3)]
    for i in range(60):
        submit(rng.choice(users), f"be{i}", num_gpus=rng.choice([1, 1, 2, 3]), grace_period=rng.choice([1, 5, 30]))

    step = LockStep()
    threads = [threading.Thread(target=step.run) for _ in range(2)]
    for t in threads:
        t.start()
    agents = FakeAgents(sent, seed=3)
    te_jobs: set[int] = set()
    try:
        while any(t.is_alive() for t in threads):
            if (Attempt.objects.count() >= TARGET_ATTEMPTS
                    and Attempt.objects.filter(state="PREEMPTED").count() >= TARGET_PREEMPTIONS):
                step.stop_requested.set()
            agents.pump()
            agents.finish_some(te_jobs)
            roll = rng.random()
            if roll < 0.15:
                te_jobs.add(submit(rng.choice(users), "te", job_class="TE", num_gpus=rng.choice([1, 2])).pk)
            elif roll < 0.18:
                live = list(Job.objects.filter(state__in=ACTIVE_STATES | {JobState.PENDING})
                            .exclude(state=JobState.CANCELLING).order_by("pk"))
                if live:
                    job = rng.choice(live)
                    job_services.cancel_job(job, job.owner)
        for t in threads:
            t.join()
        for _ in range(3):  # let the last commands land and settle
            agents.pump()
            loop.run_cycle()
        agents.pump()
    finally:
        for t in threads:
            t.join(timeout=60)

    assert step.errors == []
    assert step.stop_requested.is_set(), (
        f"{MAX_ROUNDS} rounds gave only {Attempt.objects.count()} attempts and "
        f"{Attempt.objects.filter(state='PREEMPTED').count()} preemptions"
    )
    assert agents.violations == []
    assert allocation_problems() == []
    assert _gpu_history_overlaps() == []
    assert step.skipped, "no decision ever lost a race: the test did not exercise concurrent writers"
