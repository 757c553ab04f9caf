"""Agent events on the database: register, heartbeat, started, exited, log, node loss, re-sends."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from cluster import liveness, overdue, protocol, registration, reports
from cluster.models import Gpu, Node, NodeState
from scheduler.models import Attempt, AttemptLog, AttemptState, Job, JobEvent, JobState
from tests.live_helpers import allocation_problems, make_node, make_user

pytestmark = pytest.mark.django_db


@pytest.fixture
def owner(db) -> Any:  # noqa: ANN001
    return make_user("alice")


def placed_job(owner: Any, allocation: dict[str, list[int]], *, state: str = JobState.RUNNING, attempt: int = 1,
               grace: int = 10, started_ago: float = 100.0, **fields: Any) -> Job:
    """A job in ``state`` whose attempt ``attempt`` holds ``allocation`` (as the loop would have written it)."""
    now = timezone.now()
    gpus = sum(len(v) for v in allocation.values())
    job = Job.objects.create(owner=owner, name="j", command="python train.py", num_gpus=gpus, state=state,
                             attempt_count=attempt, grace_period=grace, **fields)
    att_state = AttemptState.STARTING if state == JobState.STARTING else AttemptState.RUNNING
    Attempt.objects.create(job=job, number=attempt, gpu_allocation=allocation, state=att_state,
                           started_at=now - timedelta(seconds=started_ago))
    for node, indices in allocation.items():
        assert Gpu.objects.filter(node__name=node, index__in=indices, allocated_to=None).update(allocated_to=job) == len(indices)
    return job


def exit_report(job: Job, node: str = "n1", attempt: int | None = None, **kw: Any) -> str | None:
    now = timezone.now()
    values = {"exit_code": 0, "signal": None, "ended_at": now, "notice_at": None, "checkpointed": False,
              "reason": None, "now": now, **kw}
    return reports.attempt_exited(node, job.pk, attempt or job.attempt_count, **values)


# --- register and heartbeat ------------------------------------------------------------


def test_register_creates_the_node_and_its_gpus_and_reconciles(sent, no_triggers, django_capture_on_commit_callbacks) -> None:
    now = timezone.now()
    with django_capture_on_commit_callbacks(execute=True):
        registration.register_node("n1", gpus=2, cpus=8, mem_gb=32, gpu_models=["A100", "A100"], agent_version="1.0", now=now)
    node = Node.objects.get(name="n1")
    assert (node.state, node.gpus, node.cpus, node.mem_gb, node.agent_version) == (NodeState.UP, 2, 8, 32, "1.0")
    assert list(node.devices.values_list("index", "model_name")) == [(0, "A100"), (1, "A100")]
    assert sent.of(protocol.AGENT_RECONCILE) == [("n1", {"keep": []})]
    assert no_triggers == ["cycle"]


def test_re_register_resizes_keeps_held_gpus_and_keeps_current_attempts(owner, sent, no_triggers,
                                                                        django_capture_on_commit_callbacks) -> None:
    make_node("n1", 4)
    job = placed_job(owner, {"n1": [3]})
    with django_capture_on_commit_callbacks(execute=True):
        registration.register_node("n1", gpus=2, cpus=0, mem_gb=0, gpu_models=[], agent_version="", now=timezone.now())
    assert sorted(Gpu.objects.filter(node__name="n1").values_list("index", flat=True)) == [0, 1, 3]  # 3 is held
    assert sent.of(protocol.AGENT_RECONCILE) == [("n1", {"keep": [[job.pk, 1]]})]


def test_a_lost_node_that_registers_again_is_up(sent, no_triggers, django_capture_on_commit_callbacks) -> None:
    make_node("n1", 1, state=NodeState.NODE_LOST)
    with django_capture_on_commit_callbacks(execute=True):
        registration.register_node("n1", gpus=1, cpus=0, mem_gb=0, gpu_models=[], agent_version="", now=timezone.now())
    assert Node.objects.get(name="n1").state == NodeState.UP


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


def test_heartbeat_of_an_unknown_node_is_ignored(sent) -> None:
    assert liveness.heartbeat("ghost", [(1, 1)], timezone.now()) == []
    assert not Node.objects.exists() and sent.items == []


def test_a_lost_node_that_heartbeats_again_is_up_and_reconciled(owner, sent, no_triggers,
                                                                django_capture_on_commit_callbacks) -> None:
    make_node("n1", 1, state=NodeState.NODE_LOST)
    with django_capture_on_commit_callbacks(execute=True):
        stale = liveness.heartbeat("n1", [(5, 1)], timezone.now())
    assert Node.objects.get(name="n1").state == NodeState.UP
    assert stale == [(5, 1)]
    assert sent.of(protocol.AGENT_RECONCILE) == [("n1", {"keep": []})]


# --- started -------------------------------------------------------------------------


def test_started_moves_the_current_attempt_to_running(owner, sent) -> None:
    make_node("n1", 1)
    job = placed_job(owner, {"n1": [0]}, state=JobState.STARTING)
    started_at = timezone.now() - timedelta(seconds=1)
    assert reports.attempt_started("n1", job.pk, 1, 4242, started_at) is True
    job.refresh_from_db()
    attempt = Attempt.objects.get(job=job)
    assert job.state == JobState.RUNNING and job.started_at == started_at
    assert (attempt.state, attempt.pid, attempt.started_at) == (AttemptState.RUNNING, 4242, started_at)
    assert JobEvent.objects.filter(job=job, from_state=JobState.STARTING, to_state=JobState.RUNNING).count() == 1
    # A repeated report changes nothing more.
    assert reports.attempt_started("n1", job.pk, 1, 4242, started_at) is True
    assert JobEvent.objects.filter(job=job, to_state=JobState.RUNNING).count() == 1


def test_started_of_a_stale_attempt_stops_it(owner, sent, django_capture_on_commit_callbacks) -> None:
    make_node("n1", 1)
    job = placed_job(owner, {"n1": [0]}, attempt=3)
    with django_capture_on_commit_callbacks(execute=True):
        assert reports.attempt_started("n1", job.pk, 2, 1, timezone.now()) is False
    assert sent.of(protocol.AGENT_KILL) == [
        ("n1", {"job_id": job.pk, "attempt": 2, "grace_period": 0.0, "reason": protocol.EXIT_STALE})
    ]
    assert Attempt.objects.get(job=job).state == AttemptState.RUNNING


def test_a_job_preempted_before_its_start_report_stays_preempting(owner, sent) -> None:
    make_node("n1", 1)
    job = placed_job(owner, {"n1": [0]}, state=JobState.PREEMPTING)
    Attempt.objects.filter(job=job).update(state=AttemptState.STARTING)
    reports.attempt_started("n1", job.pk, 1, 7, timezone.now())
    job.refresh_from_db()
    assert job.state == JobState.PREEMPTING and Attempt.objects.get(job=job).state == AttemptState.RUNNING


# --- exited -------------------------------------------------------------------------

OUTCOMES = [
    # (job state, reason, exit code, attempt outcome, job state after)
    (JobState.RUNNING, None, 0, AttemptState.COMPLETED, JobState.COMPLETED),
    (JobState.RUNNING, None, 3, AttemptState.FAILED, JobState.FAILED),
    (JobState.RUNNING, protocol.EXIT_TIMEOUT, None, AttemptState.TIMEOUT, JobState.TIMEOUT),
    (JobState.STARTING, protocol.EXIT_LAUNCH_FAILED, None, AttemptState.FAILED, JobState.FAILED),
    (JobState.CANCELLING, protocol.EXIT_CANCEL, None, AttemptState.CANCELLED, JobState.CANCELLED),
    (JobState.CANCELLING, protocol.EXIT_LOST, None, AttemptState.NODE_LOST, JobState.CANCELLED),
    (JobState.PREEMPTING, protocol.EXIT_PREEMPT, 143, AttemptState.PREEMPTED, JobState.PENDING),
    (JobState.PREEMPTING, None, 0, AttemptState.COMPLETED, JobState.COMPLETED),  # finished before the notice
    (JobState.RUNNING, protocol.EXIT_LOST, None, AttemptState.NODE_LOST, JobState.PENDING),
    (JobState.RUNNING, protocol.EXIT_AGENT_STOP, 143, AttemptState.NODE_LOST, JobState.PENDING),
]


@pytest.mark.parametrize(("state", "reason", "code", "outcome", "after"), OUTCOMES)
def test_exit_outcomes(owner, sent, no_triggers, django_capture_on_commit_callbacks, state, reason, code, outcome,
                       after) -> None:
    make_node("n1", 2)
    job = placed_job(owner, {"n1": [0, 1]}, state=state)
    with django_capture_on_commit_callbacks(execute=True):
        assert exit_report(job, reason=reason, exit_code=code) == outcome
    job.refresh_from_db()
    attempt = Attempt.objects.get(job=job)
    assert attempt.state == outcome and attempt.exit_code == code and attempt.ended_at is not None
    assert job.state == after
    assert not Gpu.objects.filter(allocated_to__isnull=False).exists()
    assert no_triggers == ["cycle"]
    if after in (JobState.COMPLETED, JobState.FAILED, JobState.TIMEOUT, JobState.CANCELLED):
        assert job.ended_at == attempt.ended_at and job.exit_code == code
    if after == JobState.PENDING:
        assert job.attempt_count == 1 and job.pending_reason in ("Preempted", "NodeLost")
    if outcome == AttemptState.NODE_LOST and after == JobState.PENDING:
        path = list(JobEvent.objects.filter(job=job).values_list("to_state", flat=True))
        assert path[-2:] == [JobState.NODE_LOST, JobState.PENDING]
    assert allocation_problems() == []


def test_a_repeated_or_late_exit_report_changes_nothing(owner, sent, no_triggers) -> None:
    make_node("n1", 1)
    job = placed_job(owner, {"n1": [0]})
    assert exit_report(job, exit_code=0) == AttemptState.COMPLETED
    events = JobEvent.objects.count()
    assert exit_report(job, exit_code=1) is None
    job.refresh_from_db()
    assert job.state == JobState.COMPLETED and JobEvent.objects.count() == events


def test_exit_of_an_old_attempt_does_not_touch_the_current_one(owner, sent, no_triggers) -> None:
    make_node("n1", 1)
    job = placed_job(owner, {"n1": [0]}, attempt=2)
    assert exit_report(job, attempt=1, exit_code=1) is None
    job.refresh_from_db()
    assert job.state == JobState.RUNNING and Gpu.objects.filter(allocated_to=job).count() == 1


def test_preemption_ledger_with_a_checkpoint(owner, sent, no_triggers, settings) -> None:
    settings.SCHEDULER_RESUME_OVERHEAD = 5.0
    make_node("n1", 2)
    job = placed_job(owner, {"n1": [0, 1]}, state=JobState.PREEMPTING, attempt=2, progress_seconds=50.0)
    attempt = Attempt.objects.get(job=job)
    notice = attempt.started_at + timedelta(seconds=65)
    ended = notice + timedelta(seconds=3)
    exit_report(job, reason=protocol.EXIT_PREEMPT, exit_code=143, notice_at=notice, ended_at=ended, checkpointed=True)
    attempt.refresh_from_db()
    job.refresh_from_db()
    assert (attempt.notice_at, attempt.vacated_at, attempt.checkpointed) == (notice, ended, True)
    assert attempt.lost_gpu_seconds == 0.0
    assert job.progress_seconds == pytest.approx(50.0 + 65 - 5)  # work to the notice, minus resume overhead
    assert job.pending_message.endswith("checkpoint written")


def test_preemption_ledger_without_a_checkpoint(owner, sent, no_triggers, settings) -> None:
    settings.SCHEDULER_RESUME_OVERHEAD = 5.0
    make_node("n1", 2)
    job = placed_job(owner, {"n1": [0, 1]}, state=JobState.PREEMPTING, progress_seconds=0.0)
    attempt = Attempt.objects.get(job=job)
    notice = attempt.started_at + timedelta(seconds=40)
    exit_report(job, reason=protocol.EXIT_PREEMPT, exit_code=None, signal=9, notice_at=notice,
                ended_at=notice + timedelta(seconds=10), checkpointed=False)
    attempt.refresh_from_db()
    job.refresh_from_db()
    assert attempt.checkpointed is False and attempt.signal == 9
    assert attempt.lost_gpu_seconds == pytest.approx(2 * 40)  # first attempt: no resume overhead
    assert job.progress_seconds == 0.0


def test_the_ledger_is_in_the_api_and_on_the_job_page(owner, sent, no_triggers) -> None:
    from django.test import Client
    from rest_framework.test import APIClient

    make_node("n1", 1)
    job = placed_job(owner, {"n1": [0]}, state=JobState.PREEMPTING)
    Attempt.objects.filter(job=job).update(preempted_for=None)
    exit_report(job, reason=protocol.EXIT_PREEMPT, exit_code=143, notice_at=timezone.now(), checkpointed=True)
    api = APIClient()
    api.force_authenticate(owner)
    (attempt,) = api.get(f"/api/v1/jobs/{job.pk}/").json()["attempts"]
    assert attempt["outcome"] == "PREEMPTED" and attempt["checkpointed"] is True
    assert attempt["notice_at"] and attempt["vacated_at"] and attempt["lost_gpu_seconds"] == 0.0
    browser = Client()
    browser.force_login(owner)
    page = browser.get(f"/jobs/{job.pk}/").content.decode()
    assert "PREEMPTED" in page and "<td>yes</td>" in page


def test_a_multi_node_attempt_ends_with_its_last_node(owner, sent, no_triggers) -> None:
    make_node("n1", 2)
    make_node("n2", 2)
    job = placed_job(owner, {"n1": [0, 1], "n2": [0]}, state=JobState.PREEMPTING)
    assert exit_report(job, "n1", reason=protocol.EXIT_PREEMPT, exit_code=143, checkpointed=True,
                       notice_at=timezone.now()) == AttemptState.PREEMPTED
    job.refresh_from_db()
    assert job.state == JobState.PREEMPTING  # n2 still holds its GPU
    assert list(Gpu.objects.filter(allocated_to=job).values_list("node__name", flat=True)) == ["n2"]
    assert exit_report(job, "n2", reason=protocol.EXIT_PREEMPT, exit_code=None, signal=9, checkpointed=False,
                       notice_at=timezone.now()) == AttemptState.PREEMPTED
    job.refresh_from_db()
    attempt = Attempt.objects.get(job=job)
    assert job.state == JobState.PENDING and attempt.checkpointed is False  # every rank must have checkpointed
    assert not Gpu.objects.filter(allocated_to__isnull=False).exists()


def test_a_failing_rank_stops_the_other_nodes(owner, sent, no_triggers, django_capture_on_commit_callbacks) -> None:
    make_node("n1", 1)
    make_node("n2", 1)
    job = placed_job(owner, {"n1": [0], "n2": [0]}, grace=4)
    with django_capture_on_commit_callbacks(execute=True):
        assert exit_report(job, "n1", exit_code=2) == AttemptState.FAILED
    assert sent.of(protocol.AGENT_KILL) == [
        ("n2", {"job_id": job.pk, "attempt": 1, "grace_period": 4.0, "reason": protocol.EXIT_STALE})
    ]
    exit_report(job, "n2", reason=protocol.EXIT_STALE, exit_code=None, signal=15)
    job.refresh_from_db()
    assert job.state == JobState.FAILED and job.exit_code == 2


# --- logs --------------------------------------------------------------------------


def test_log_lines_are_stored_and_served_by_the_api(owner) -> None:
    from rest_framework.test import APIClient

    make_node("n1", 1)
    job = placed_job(owner, {"n1": [0]})
    assert reports.append_log(job.pk, 1, ["step 1/3", "step 2/3"], timezone.now())
    assert reports.append_log(job.pk, 1, ["bad\x00byte"], timezone.now())
    assert reports.append_log(job.pk, 7, ["unknown attempt"], timezone.now()) is False
    api = APIClient()
    api.force_authenticate(owner)
    body = api.get(f"/api/v1/jobs/{job.pk}/logs/").json()
    assert body["attempt"] == 1 and body["lines"] == ["step 1/3", "step 2/3", "badbyte"]
    assert AttemptLog.objects.count() == 2


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
    for job in (lost_job, spanning):
        job.refresh_from_db()
        attempt = Attempt.objects.get(job=job)
        assert job.state == JobState.PENDING and job.pending_reason == "NodeLost"
        assert attempt.state == AttemptState.NODE_LOST and attempt.lost_gpu_seconds > 0
    assert sent.of(protocol.AGENT_KILL) == [
        ("other", {"job_id": spanning.pk, "attempt": 1, "grace_period": 0.0, "reason": protocol.EXIT_STALE})
    ]
    safe.refresh_from_db()
    assert safe.state == JobState.RUNNING
    assert allocation_problems() == []
    assert not Gpu.objects.filter(node__name__in=["silent", "other"], allocated_to__isnull=False).exists()
    assert liveness.detect_lost_nodes(now) == []  # already lost


def test_a_cancelling_job_on_a_lost_node_is_cancelled(owner, sent, no_triggers, settings) -> None:
    settings.AGENT_HEARTBEAT_SECONDS, settings.NODE_LOST_HEARTBEATS = 1.0, 2
    make_node("n1", 1)
    Node.objects.update(last_heartbeat=timezone.now() - timedelta(seconds=10))
    job = placed_job(owner, {"n1": [0]}, state=JobState.CANCELLING)
    liveness.detect_lost_nodes(timezone.now())
    job.refresh_from_db()
    assert job.state == JobState.CANCELLED and Attempt.objects.get(job=job).state == AttemptState.NODE_LOST


def test_overdue_stops_and_launches_are_re_sent(owner, sent, settings) -> None:
    settings.AGENT_HEARTBEAT_SECONDS, settings.NODE_LOST_HEARTBEATS = 1.0, 2
    make_node("n1", 3)
    now = timezone.now()
    preempting = placed_job(owner, {"n1": [0]}, state=JobState.PREEMPTING, grace=5)
    Attempt.objects.filter(job=preempting).update(notice_at=now - timedelta(seconds=8))  # 5 + 2 < 8: overdue
    patient = placed_job(owner, {"n1": [1]}, state=JobState.CANCELLING, grace=5)
    Attempt.objects.filter(job=patient).update(notice_at=now - timedelta(seconds=6))  # not overdue yet
    starting = placed_job(owner, {"n1": [2]}, state=JobState.STARTING, started_ago=3)
    resent = overdue.resend_overdue_commands(now)
    assert sorted(resent) == sorted([(protocol.AGENT_PREEMPT, preempting.pk, 1), (protocol.AGENT_LAUNCH, starting.pk, 1)])
    assert ("n1", {"job_id": preempting.pk, "attempt": 1, "grace_period": 0.0}) in sent.of(protocol.AGENT_PREEMPT)
    ((_, launch),) = sent.launches
    assert launch["gpu_indices"] == [2] and launch["resume"] is False


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
