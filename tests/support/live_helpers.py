"""Shared helpers for the loop, service and end-to-end tests: users, nodes, jobs,
recorded agent commands (fixtures ``sent`` and ``no_triggers``, imported by the
conftests that use them) and the allocation invariants.

Django is imported inside the functions so that importing this module needs no
app registry.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pytest

from cluster import protocol


@dataclass
class SentCommands:
    """Agent commands captured instead of being published: ``(node, task, kwargs)``."""

    items: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)

    def record(self, node: str, task: str, kwargs: dict[str, Any]) -> bool:
        self.items.append((node, task, kwargs))
        return True

    def of(self, task: str) -> list[tuple[str, dict[str, Any]]]:
        return [(node, kw) for node, t, kw in self.items if t == task]

    @property
    def launches(self) -> list[tuple[str, dict[str, Any]]]:
        return self.of(protocol.AGENT_LAUNCH)

    def clear(self) -> None:
        self.items.clear()


@pytest.fixture
def sent(monkeypatch) -> SentCommands:  # noqa: ANN001
    """Agent commands are recorded here instead of being published to the broker."""
    from cluster import commands

    box = SentCommands()
    monkeypatch.setattr(commands, "send", box.record)
    return box


@pytest.fixture
def no_triggers(monkeypatch) -> list[str]:  # noqa: ANN001
    """Scheduling requests made by the agent-report services are counted instead of enqueued."""
    import scheduler.triggers

    calls: list[str] = []
    monkeypatch.setattr(scheduler.triggers, "request_scheduling", lambda: calls.append("cycle") or True)
    return calls


def make_user(name: str, **fields: Any):  # noqa: ANN201
    from django.contrib.auth.models import User

    return User.objects.create_user(name, f"{name}@example.org", "a-long-test-password-42", **fields)


def make_node(name: str, gpus: int, *, state: str = "UP", cpus: float = 0.0, mem_gb: float = 0.0):  # noqa: ANN201
    """A registered node with ``gpus`` GPU rows and a fresh heartbeat."""
    from django.utils import timezone

    from cluster.models import Gpu, Node

    node = Node.objects.create(name=name, gpus=gpus, cpus=cpus, mem_gb=mem_gb, state=state,
                               last_heartbeat=timezone.now())
    Gpu.objects.bulk_create(Gpu(node=node, index=i, model_name="Virtual GPU") for i in range(gpus))
    return node


def submit(owner, name: str = "job", **fields: Any):  # noqa: ANN001, ANN201
    """Submit through the real service (validation, quotas, submission event)."""
    from scheduler.services import JobRequest, submit_job

    values = {"command": "python train.py", "job_class": "BE", "num_gpus": 1, "grace_period": 10, **fields}
    return submit_job(owner, JobRequest(name=name, **values))


def run_cycle(capture, **kwargs: Any):  # noqa: ANN001, ANN201
    """One scheduling cycle with its on-commit callbacks run (``capture``: django_capture_on_commit_callbacks)."""
    from scheduler import loop

    with capture(execute=True):
        return loop.run_cycle(**kwargs)


def allocation_problems() -> list[str]:
    """Every way the database breaks the allocation invariants (empty: none).

    * an active job holds exactly its GPU count (a reconfigurable one: a count
      in its range; an adaptive one: 1 to its most), and exactly the GPUs its current attempt lists; no other
      job holds GPUs;
    * no GPU appears in two open attempts;
    * a job has at most one open attempt, and it is the current one.

    The rows are read in one snapshot: on PostgreSQL, when not already inside
    a transaction, in a REPEATABLE READ transaction of their own. A live
    worker commits while tests check, and separate reads could otherwise
    combine the GPUs before a start with the job and attempt after it, and
    report a broken invariant that no committed state ever had. (Inside a
    test's own transaction nothing else can commit between the reads that
    would matter: pytest-django's ``db`` tests see no other writer's rows.)
    """
    from django.db import connection, transaction

    if connection.in_atomic_block or connection.vendor != "postgresql":
        return _allocation_problems()
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        return _allocation_problems()


def _allocation_problems() -> list[str]:
    from cluster.models import Gpu
    from scheduler.models import ACTIVE_STATES, OPEN_ATTEMPT_STATES, Attempt, Job

    problems: list[str] = []
    held: dict[int, set[tuple[str, int]]] = {}
    for job_id, node, index in Gpu.objects.filter(allocated_to__isnull=False).values_list(
        "allocated_to", "node__name", "index"
    ):
        held.setdefault(job_id, set()).add((node, index))
    jobs = {j.pk: j for j in Job.objects.all()}
    open_attempts = list(Attempt.objects.filter(state__in=OPEN_ATTEMPT_STATES))
    per_job = Counter(a.job_id for a in open_attempts)
    for job_id, n in per_job.items():
        if n > 1:
            problems.append(f"job {job_id} has {n} open attempts")
    seen: dict[tuple[str, int], int] = {}
    for a in open_attempts:
        if a.number != jobs[a.job_id].attempt_count:
            problems.append(f"job {a.job_id}: open attempt {a.number} is not the current {jobs[a.job_id].attempt_count}")
        for node, indices in a.gpu_allocation.items():
            for index in indices:
                other = seen.setdefault((node, index), a.job_id)
                if other != a.job_id:
                    problems.append(f"GPU {node}:{index} in open attempts of jobs {other} and {a.job_id}")
    for job in jobs.values():
        gpus = held.get(job.pk, set())
        if job.state in ACTIVE_STATES:
            attempt = Attempt.objects.filter(job=job, number=job.attempt_count).first()
            listed = {(n, i) for n, idx in (attempt.gpu_allocation if attempt else {}).items() for i in idx}
            # Reconfigurable or adaptive: its range.
            low, high = job.gpu_range if job.model or job.adaptive_app else (job.num_gpus, job.num_gpus)
            if not low <= len(gpus) <= high:
                problems.append(f"job {job.pk} ({job.state}) holds {len(gpus)} GPUs, needs {job.num_gpus}")
            if gpus != listed:
                problems.append(f"job {job.pk}: GPUs held {sorted(gpus)} differ from its attempt's {sorted(listed)}")
        elif gpus:
            problems.append(f"job {job.pk} ({job.state}) holds GPUs {sorted(gpus)}")
    return problems


def log_lines(attempt) -> list[str]:  # noqa: ANN001
    """Every stored log line of ``attempt``, read as the API reads a page of it."""
    from scheduler.attempt_log import log_page

    return log_page(attempt.pk, 0, 10**9).lines
