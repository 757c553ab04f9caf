"""Node liveness on the database: heartbeats, attempts a node stops listing, silent nodes declared lost."""

from __future__ import annotations

import logging

from datetime import timedelta

import pytest
from django.utils import timezone

from cluster import liveness, protocol
from cluster.models import Gpu, Node, NodeState
from scheduler.models import Attempt, AttemptState, Job, JobState
from tests.support.live_helpers import allocation_problems, make_node
from tests.support.placed_jobs import exit_report, owner, placed_job  # noqa: F401 - owner is a fixture

pytestmark = pytest.mark.django_db


def test_heartbeat_stops_attempts_the_database_does_not_expect(owner, sent, no_triggers,
                                                              django_capture_on_commit_callbacks) -> None:
    make_node("n1", 2)
    current = placed_job(owner, {"n1": [0]}, attempt=2)
    finished = placed_job(owner, {"n1": [1]}, state=JobState.COMPLETED)
    Gpu.objects.filter(allocated_to=finished).update(allocated_to=None)
    before = Node.objects.get(name="n1").last_heartbeat
    with django_capture_on_commit_callbacks(execute=True):
        stale = liveness.heartbeat("n1", [(current.pk, 2), (current.pk, 1), (finished.pk, 1), (999, 1)],
                                   timezone.now())
    assert stale == sorted([(current.pk, 1), (finished.pk, 1), (999, 1)])
    kills = sorted((kw["job_id"], kw["attempt"], kw["reason"], kw["grace_period"]) for _, kw in sent.of(protocol.AGENT_KILL))
    assert kills == sorted((j, a, protocol.EXIT_STALE, 0.0) for j, a in stale)
    assert Node.objects.get(name="n1").last_heartbeat > before


def test_heartbeat_of_an_unknown_node_asks_its_agent_to_register_again_now_and_then(sent, monkeypatch,
                                                                                     caplog) -> None:
    clock = [1000.0]
    monkeypatch.setattr(liveness.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(liveness, "_asked_to_register", {})
    monkeypatch.setattr(liveness, "_unknown_since", {})
    # Its registration may still be in flight in another worker process: not asked yet.
    assert liveness.heartbeat("ghost", [(1, 1)], timezone.now()) == []
    clock[0] += liveness.REGISTRATION_IN_FLIGHT_S - 0.5
    liveness.heartbeat("ghost", [(1, 1)], timezone.now())
    assert sent.of(protocol.AGENT_REGISTER_AGAIN) == []
    clock[0] += 0.5
    with caplog.at_level(logging.INFO, logger="cluster.liveness"):
        assert liveness.heartbeat("ghost", [(1, 1)], timezone.now()) == []
    # The first time is routine (after a restore from a backup): no warning.
    assert [r.levelno for r in caplog.records if "unknown node 'ghost'" in r.message] == [logging.INFO]
    assert not Node.objects.exists()
    assert sent.of(protocol.AGENT_REGISTER_AGAIN) == [("ghost", {})]
    clock[0] += liveness.REGISTER_AGAIN_INTERVAL_S - 1
    liveness.heartbeat("ghost", [(1, 1)], timezone.now())
    liveness.heartbeat("other", [], timezone.now())
    clock[0] += liveness.REGISTRATION_IN_FLIGHT_S
    liveness.heartbeat("other", [], timezone.now())
    clock[0] += 1 - liveness.REGISTRATION_IN_FLIGHT_S
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="cluster.liveness"):
        liveness.heartbeat("ghost", [(1, 1)], timezone.now())
    assert [r.levelno for r in caplog.records if "unknown node 'ghost'" in r.message] == [logging.WARNING]
    assert sent.of(protocol.AGENT_REGISTER_AGAIN) == [("ghost", {}), ("other", {}), ("ghost", {})]
    assert not Node.objects.exists()


def test_a_heartbeat_that_overtakes_the_registration_asks_nothing(sent, monkeypatch) -> None:
    """At a stack's first start: the first heartbeat is handled before the registration is stored,
    the next one after it. The agent is not asked to register a second time."""
    clock = [1000.0]
    monkeypatch.setattr(liveness.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(liveness, "_unknown_since", {}, raising=False)
    liveness.heartbeat("fresh", [], timezone.now())
    make_node("fresh", 4)
    clock[0] += 5
    liveness.heartbeat("fresh", [], timezone.now())
    assert sent.of(protocol.AGENT_REGISTER_AGAIN) == []
    assert liveness._unknown_since == {}


def test_a_lost_node_that_heartbeats_again_is_up_and_reconciled(owner, sent, no_triggers,
                                                                django_capture_on_commit_callbacks) -> None:
    make_node("n1", 1, state=NodeState.NODE_LOST)
    with django_capture_on_commit_callbacks(execute=True):
        stale = liveness.heartbeat("n1", [(5, 1)], timezone.now())
    assert Node.objects.get(name="n1").state == NodeState.UP
    assert stale == [(5, 1)]
    assert sent.of(protocol.AGENT_RECONCILE) == [("n1", {"keep": []})]


# --- node loss and re-sends ---------------------------------------------------------


def test_a_silent_node_is_lost_and_its_jobs_requeued(owner, sent, no_triggers, settings,
                                                     django_capture_on_commit_callbacks) -> None:
    settings.AGENT_HEARTBEAT_SECONDS, settings.NODE_LOST_HEARTBEATS = 1.0, 3
    now = timezone.now()
    silent, alive, other = make_node("silent", 2), make_node("alive", 2), make_node("other", 2)
    Node.objects.filter(pk=silent.pk).update(last_heartbeat=now - timedelta(seconds=4))
    Node.objects.filter(pk=alive.pk).update(last_heartbeat=now - timedelta(seconds=2))
    lost_job = placed_job(owner, {"silent": [0]})
    spanning = placed_job(owner, {"silent": [1], "other": [0]})
    safe = placed_job(owner, {"alive": [0]})

    with django_capture_on_commit_callbacks(execute=True):
        assert liveness.detect_lost_nodes(now) == ["silent"]
    assert Node.objects.get(name="silent").state == NodeState.NODE_LOST
    assert Node.objects.get(name="alive").state == NodeState.UP
    lost_job.refresh_from_db()
    attempt = Attempt.objects.get(job=lost_job)
    assert lost_job.state == JobState.PENDING and lost_job.pending_reason == "NodeLost"
    assert lost_job.pending_message == "attempt 1 lost on silent (silent: no heartbeat for 3 s)"
    assert attempt.state == AttemptState.NODE_LOST and attempt.lost_gpu_seconds > 0
    # The rank on the surviving node gets SIGTERM and the job's grace, and keeps its GPU until it has stopped.
    assert sent.of(protocol.AGENT_KILL) == [
        ("other", {"job_id": spanning.pk, "attempt": 1, "grace_period": 10.0, "reason": protocol.EXIT_STALE})
    ]
    spanning.refresh_from_db()
    assert spanning.state == JobState.RUNNING and Attempt.objects.get(job=spanning).state == AttemptState.NODE_LOST
    assert list(Gpu.objects.filter(allocated_to=spanning).values_list("node__name", "index")) == [("other", 0)]
    exit_report(spanning, "other", reason=protocol.EXIT_STALE, exit_code=None, signal=15, checkpointed=True,
                notice_at=now + timedelta(seconds=1))
    spanning.refresh_from_db()
    assert spanning.state == JobState.PENDING and spanning.pending_reason == "NodeLost"
    assert spanning.pending_message == ("attempt 1 lost on other, silent (silent: no heartbeat for 3 s); "
                                        "checkpoint written")
    survivor_attempt = Attempt.objects.get(job=spanning)
    assert survivor_attempt.state == AttemptState.NODE_LOST and survivor_attempt.checkpointed is True
    safe.refresh_from_db()
    assert safe.state == JobState.RUNNING
    assert allocation_problems() == []
    assert not Gpu.objects.filter(node__name__in=["silent", "other"], allocated_to__isnull=False).exists()
    assert liveness.detect_lost_nodes(now) == []  # already lost


def test_a_node_lost_under_a_stopping_multi_node_job_leaves_its_other_ranks_their_stop(
        owner, sent, no_triggers, settings, django_capture_on_commit_callbacks) -> None:
    """A job being preempted already sent its ranks SIGTERM with its grace: losing one node neither
    cuts the others' grace short nor frees their GPUs before they report."""
    settings.AGENT_HEARTBEAT_SECONDS, settings.NODE_LOST_HEARTBEATS = 1.0, 2
    now = timezone.now()
    make_node("n1", 1)
    make_node("n2", 1)
    Node.objects.filter(name="n1").update(last_heartbeat=now - timedelta(seconds=5))
    Node.objects.filter(name="n2").update(last_heartbeat=now)
    job = placed_job(owner, {"n1": [0], "n2": [0]}, state=JobState.PREEMPTING)
    Attempt.objects.filter(job=job).update(notice_at=now - timedelta(seconds=1))
    with django_capture_on_commit_callbacks(execute=True):
        assert liveness.detect_lost_nodes(now) == ["n1"]
    assert sent.of(protocol.AGENT_KILL) == []
    job.refresh_from_db()
    assert job.state == JobState.PREEMPTING
    assert list(Gpu.objects.filter(allocated_to=job).values_list("node__name", flat=True)) == ["n2"]
    exit_report(job, "n2", reason=protocol.EXIT_PREEMPT, exit_code=None, signal=15, checkpointed=True,
                notice_at=now - timedelta(seconds=1))
    job.refresh_from_db()
    assert job.state == JobState.PENDING and Attempt.objects.get(job=job).state == AttemptState.NODE_LOST


def test_a_cancelling_job_on_a_lost_node_is_cancelled(owner, sent, no_triggers, settings) -> None:
    settings.AGENT_HEARTBEAT_SECONDS, settings.NODE_LOST_HEARTBEATS = 1.0, 2
    make_node("n1", 1)
    Node.objects.update(last_heartbeat=timezone.now() - timedelta(seconds=10))
    job = placed_job(owner, {"n1": [0]}, state=JobState.CANCELLING)
    liveness.detect_lost_nodes(timezone.now())
    job.refresh_from_db()
    assert job.state == JobState.CANCELLED and Attempt.objects.get(job=job).state == AttemptState.NODE_LOST


# --- attempts an agent no longer lists ----------------------------------------------------


def test_an_attempt_missing_from_heartbeats_for_too_long_is_lost(owner, sent, no_triggers, settings) -> None:
    settings.AGENT_HEARTBEAT_SECONDS, settings.NODE_LOST_HEARTBEATS = 1.0, 2  # unseen limit: 4 s
    make_node("n1", 2)
    running = placed_job(owner, {"n1": [0]})
    cancelling = placed_job(owner, {"n1": [1]}, state=JobState.CANCELLING)
    t0 = timezone.now()
    liveness.heartbeat("n1", [], t0)
    marks = {a.job_id: a.unseen_since for a in Attempt.objects.all()}
    assert marks == {running.pk: {"n1": t0.timestamp()}, cancelling.pk: {"n1": t0.timestamp()}}
    liveness.heartbeat("n1", [], t0 + timedelta(seconds=3))  # within the limit: nothing yet
    assert {j.state for j in Job.objects.all()} == {JobState.RUNNING, JobState.CANCELLING}

    liveness.heartbeat("n1", [], t0 + timedelta(seconds=5))
    running.refresh_from_db()
    cancelling.refresh_from_db()
    assert running.state == JobState.PENDING and running.pending_reason == "NodeLost"
    assert cancelling.state == JobState.CANCELLED
    assert {a.state for a in Attempt.objects.all()} == {AttemptState.NODE_LOST}
    assert not Gpu.objects.filter(allocated_to__isnull=False).exists()


def _outcome(exit_code: int | None, signal: int | None = None, reason: str | None = None) -> dict[str, object]:
    """What a heartbeat repeats of an exit (cluster.report_fields.parse_exit's outcome)."""
    return {"exit_code": exit_code, "signal": signal, "ended_at": timezone.now(), "notice_at": None,
            "checkpointed": False, "reason": reason, "message": "", "peak_mem_bytes": None, "cpu_seconds": None}


def test_an_unlisted_attempt_whose_exit_the_heartbeats_repeat_ends_as_reported_not_lost(
        owner, sent, no_triggers, settings) -> None:
    """Its exit report was lost or held up: the job completed, so it is not run again."""
    settings.AGENT_HEARTBEAT_SECONDS, settings.NODE_LOST_HEARTBEATS = 1.0, 2  # unseen limit: 4 s
    make_node("n1", 2)
    done = placed_job(owner, {"n1": [0]})
    silent = placed_job(owner, {"n1": [1]})
    repeated = {(done.pk, 1): _outcome(0), (silent.pk, 2): _outcome(1)}  # another attempt of silent's job
    reads = []

    def exited():
        reads.append(1)
        return repeated

    t0 = timezone.now()
    liveness.heartbeat("n1", [], t0, exited=exited)
    liveness.heartbeat("n1", [], t0 + timedelta(seconds=3), exited=exited)  # the report may still come
    assert set(Job.objects.values_list("state", flat=True)) == {JobState.RUNNING}
    assert reads == []  # read only when an attempt is to be ended

    liveness.heartbeat("n1", [], t0 + timedelta(seconds=5), exited=exited)
    assert reads == [1]
    done.refresh_from_db()
    silent.refresh_from_db()
    assert done.state == JobState.COMPLETED
    assert [(a.state, a.exit_code) for a in done.attempts.all()] == [(AttemptState.COMPLETED, 0)]
    assert silent.state == JobState.PENDING and Attempt.objects.get(job=silent).state == AttemptState.NODE_LOST
    assert not Gpu.objects.filter(allocated_to__isnull=False).exists()
    assert allocation_problems() == []


def test_a_repeated_exit_changes_nothing_once_the_exit_report_was_handled(owner, sent, no_triggers, settings) -> None:
    settings.AGENT_HEARTBEAT_SECONDS, settings.NODE_LOST_HEARTBEATS = 1.0, 2
    make_node("n1", 1)
    job = placed_job(owner, {"n1": [0]})
    t0 = timezone.now()
    liveness.heartbeat("n1", [], t0)
    exit_report(job, "n1", exit_code=4)  # the report arrives: the job failed
    liveness.heartbeat("n1", [], t0 + timedelta(seconds=5), exited=lambda: {(job.pk, 1): _outcome(0)})
    job.refresh_from_db()
    assert job.state == JobState.FAILED
    assert [(a.state, a.exit_code) for a in job.attempts.all()] == [(AttemptState.FAILED, 4)]


def test_a_listed_attempt_clears_its_mark(owner, sent, no_triggers, settings) -> None:
    settings.AGENT_HEARTBEAT_SECONDS, settings.NODE_LOST_HEARTBEATS = 1.0, 2
    make_node("n1", 1)
    job = placed_job(owner, {"n1": [0]})
    t0 = timezone.now()
    liveness.heartbeat("n1", [], t0)  # e.g. sent before the agent got the launch
    liveness.heartbeat("n1", [(job.pk, 1)], t0 + timedelta(seconds=1))
    assert Attempt.objects.get(job=job).unseen_since == {}
    liveness.heartbeat("n1", [], t0 + timedelta(seconds=6))  # a new gap starts here
    job.refresh_from_db()
    assert job.state == JobState.RUNNING


def test_a_lost_rank_of_a_multi_node_attempt_stops_the_others(owner, sent, no_triggers, settings,
                                                              django_capture_on_commit_callbacks) -> None:
    settings.AGENT_HEARTBEAT_SECONDS, settings.NODE_LOST_HEARTBEATS = 1.0, 2
    make_node("n1", 1)
    make_node("n2", 1)
    job = placed_job(owner, {"n1": [0], "n2": [0]}, grace=3)
    t0 = timezone.now()
    liveness.heartbeat("n1", [(job.pk, 1)], t0)
    liveness.heartbeat("n2", [], t0)
    with django_capture_on_commit_callbacks(execute=True):
        liveness.heartbeat("n1", [(job.pk, 1)], t0 + timedelta(seconds=5))
        liveness.heartbeat("n2", [], t0 + timedelta(seconds=5))
    assert Attempt.objects.get(job=job).unseen_since == {"n2": t0.timestamp()}
    assert sent.of(protocol.AGENT_KILL) == [
        ("n1", {"job_id": job.pk, "attempt": 1, "grace_period": 3.0, "reason": protocol.EXIT_STALE})
    ]
    job.refresh_from_db()
    assert job.state == JobState.RUNNING  # until n1's rank has vacated too
    exit_report(job, "n1", reason=protocol.EXIT_STALE, exit_code=None, signal=15)
    job.refresh_from_db()
    assert job.state == JobState.PENDING and Attempt.objects.get(job=job).state == AttemptState.NODE_LOST
