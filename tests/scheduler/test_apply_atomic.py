"""A cycle that dies half-way leaves nothing behind: no rows, no agent commands."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from django.db import connection

from cluster.models import Gpu
from scheduler import apply, coordination, loop, transitions
from scheduler.models import Attempt, Job, JobEvent, JobState
from tests.support.live_helpers import allocation_problems, make_node, make_user, submit

ROOT = Path(__file__).resolve().parents[2]


def _nothing_started(jobs: list[Job]) -> None:
    for job in jobs:
        job.refresh_from_db()
        assert (job.state, job.attempt_count, job.pending_reason) == (JobState.PENDING, 0, "")
    assert not Attempt.objects.exists()
    assert not Gpu.objects.filter(allocated_to__isnull=False).exists()
    assert not JobEvent.objects.exclude(to_state=JobState.PENDING).exists()


@pytest.mark.django_db
def test_an_exception_after_some_writes_rolls_back_everything(sent, monkeypatch,
                                                              django_capture_on_commit_callbacks) -> None:
    make_node("n1", 4)
    alice = make_user("alice")
    jobs = [submit(alice, f"j{i}") for i in range(3)]
    real_events = transitions.record_events
    written = []

    def events_then_fail(events) -> None:  # noqa: ANN001
        real_events(events)
        written.append(JobEvent.objects.filter(to_state=JobState.STARTING).count())
        raise RuntimeError("worker died")

    monkeypatch.setattr(transitions, "record_events", events_then_fail)
    with django_capture_on_commit_callbacks(execute=True) as callbacks, pytest.raises(RuntimeError, match="worker died"):
        loop.run_cycle()
    assert written == [3]  # the three starts were fully written (their events last) before the failure
    assert callbacks == [] and sent.items == []
    _nothing_started(jobs)


KILLER = textwrap.dedent(
    """
    import os, signal, sys
    import django
    django.setup()
    from cluster import commands
    from scheduler import apply, loop, transitions

    marker = sys.argv[1]
    commands.send = lambda *args: open(marker, "a").write(repr(args) + "\\n") and True
    from scheduler.models import JobEvent
    real_events = transitions.record_events

    def events_then_die(events):
        real_events(events)
        open(marker + ".writes", "w").write(str(JobEvent.objects.filter(to_state="STARTING").count()))
        os.kill(os.getpid(), signal.SIGKILL)

    transitions.record_events = events_then_die
    loop.run_requested_cycles()
    """
)


@pytest.mark.django_db(transaction=True)
@pytest.mark.redis
def test_a_worker_killed_mid_cycle_leaves_no_half_applied_state(redis_url, settings, sent, tmp_path) -> None:
    """A real process is SIGKILLed inside the cycle's transaction after its three starts were written.

    Nothing it wrote survives, no command left it, its Redis lock (with a
    timeout) keeps other runners off until it expires, and then the next runner
    schedules the jobs normally.
    """
    settings.REDIS_URL = redis_url
    client = coordination.redis_client()
    client.delete(loop.LOCK_KEY, loop.REQUEST_KEY)
    make_node("n1", 4)
    alice = make_user("alice")
    jobs = [submit(alice, f"j{i}") for i in range(3)]
    marker = tmp_path / "sent"
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "portal.settings_test",
        "DATABASE_URL": _database_url(),
        "REDIS_URL": redis_url,
        "SCHEDULER_LOCK_TIMEOUT": "600",  # far longer than the test: it cannot expire by itself
    }
    result = subprocess.run([sys.executable, "-c", KILLER, str(marker)], cwd=ROOT, env=env, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == -9, result.stderr
    assert (tmp_path / "sent.writes").read_text() == "3"
    assert not marker.exists()
    _nothing_started(jobs)

    ttl = client.pttl(loop.LOCK_KEY)
    assert 0 < ttl <= 600_000  # the dead worker's lock is still there, and it will expire...
    assert loop.run_requested_cycles() == 0  # ...meanwhile this runner leaves the request to its holder
    client.pexpire(loop.LOCK_KEY, 1)  # let the lock's timeout pass
    deadline = time.monotonic() + 60
    while client.exists(loop.LOCK_KEY):
        assert time.monotonic() < deadline, "the dead worker's lock never expired"
        time.sleep(0.01)
    assert loop.run_requested_cycles() == 1
    assert {j.state for j in Job.objects.all()} == {JobState.STARTING}
    assert allocation_problems() == []
    assert len(sent.launches) == 3


def _database_url() -> str:
    db = connection.settings_dict
    return f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"
