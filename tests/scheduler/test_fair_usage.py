"""Live fair share: tenants' usage read from the attempts, and the live loop ordering and reclaiming by it."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from scheduler import loop
from scheduler.core.fairshare import UsageLedger
from scheduler import fair_usage
from scheduler.fair_usage import decayed_gpu_seconds, tenant_usage
from scheduler.models import Attempt, AttemptState, Job, JobState
from scheduler.projects import Membership, Project
from tests.support.live_helpers import make_user, submit

pytestmark = pytest.mark.django_db

HOUR = 3600.0


def _member(user, name: str, share: float = 1.0) -> Project:  # noqa: ANN001
    project, _ = Project.objects.get_or_create(name=name, defaults={"share": share})
    Membership.objects.create(project=project, user=user, is_default=True)
    return project


def _past_attempt(owner, project, gpus: int, started_ago: float, ended_ago: float | None):  # noqa: ANN001, ANN201
    """A job that ran ``gpus`` GPUs from ``started_ago`` to ``ended_ago`` seconds ago (None: still open)."""
    now = timezone.now()
    job = Job.objects.create(owner=owner, project=project, name="old", command="x", num_gpus=gpus,
                             state=JobState.COMPLETED if ended_ago is not None else JobState.RUNNING)
    return Attempt.objects.create(
        job=job, number=1, gpu_allocation={"gone": list(range(gpus))},
        state=AttemptState.COMPLETED if ended_ago is not None else AttemptState.RUNNING,
        started_at=now - timedelta(seconds=started_ago),
        ended_at=None if ended_ago is None else now - timedelta(seconds=ended_ago))


def test_the_integral_is_the_simulators_ledger() -> None:
    ledger = UsageLedger({"a": 1.0}, half_life=HOUR)
    ledger.add("a", "u", 4, now=1000.0)
    ledger.add("a", "u", -4, now=1000.0 + 2 * HOUR)
    expected = ledger.state(1000.0 + 5 * HOUR)["a"].usage
    assert decayed_gpu_seconds(4, 1000.0, 1000.0 + 2 * HOUR, 1000.0 + 5 * HOUR, HOUR) == pytest.approx(expected)
    assert decayed_gpu_seconds(4, 10.0, 10.0, 20.0, HOUR) == 0.0


def test_tenant_usage_per_project_and_user_with_shares_and_a_horizon() -> None:
    alice, bob, carol = make_user("alice"), make_user("bob"), make_user("carol")
    vision, nlp = _member(alice, "vision", share=3.0), _member(bob, "nlp")
    _member(make_user("dave"), "idle", share=2.0)
    _past_attempt(alice, vision, 2, started_ago=2 * HOUR, ended_ago=HOUR)
    _past_attempt(bob, nlp, 1, started_ago=HOUR, ended_ago=None)
    _past_attempt(carol, None, 8, started_ago=30 * HOUR, ended_ago=25 * HOUR)  # beyond 20 half-lives of 1 h
    _past_attempt(carol, None, 1, started_ago=HOUR, ended_ago=0.0)
    state = tenant_usage(timezone.now(), HOUR)
    assert set(state) == {"vision", "nlp", "idle", ""}
    assert state["vision"].share == 3.0 and state["idle"].share == 2.0 and state[""].share == 1.0
    assert state["idle"].usage == 0.0
    # 2 GPUs for an hour that ended an hour ago: 2 * h/ln2 * (1/2 - 1/4).
    assert state["vision"].usage == pytest.approx(2 * HOUR / 0.6931471805599453 * 0.25, rel=1e-3)
    assert state["nlp"].usage == pytest.approx(HOUR / 0.6931471805599453 * 0.5, rel=1e-3)
    assert state["vision"].users == {str(alice.pk): pytest.approx(state["vision"].usage)}
    assert state[""].usage == pytest.approx(state["nlp"].usage, rel=1e-3)


def _cycle(capture):  # noqa: ANN001, ANN201
    with capture(execute=True):
        return loop.run_cycle()


@pytest.mark.parametrize("fair, first", [(True, "light"), (False, "heavy")])
def test_fair_share_changes_the_live_order(settings, nodes, sent, django_capture_on_commit_callbacks,
                                           fair, first) -> None:
    settings.SCHEDULER_FAIR_SHARE = fair
    heavy_user, light_user = make_user("hana"), make_user("lior")
    heavy = _member(heavy_user, "heavy")
    _member(light_user, "light")
    _past_attempt(heavy_user, heavy, 8, started_ago=2 * HOUR, ended_ago=HOUR / 2)
    nodes(("n1", 1))
    jobs = {"heavy": submit(heavy_user, "h"), "light": submit(light_user, "l")}
    report = _cycle(django_capture_on_commit_callbacks)
    assert report.applied.started == [jobs[first].pk]


@pytest.mark.parametrize("ran, reclaimed", [(1200.0, True), (300.0, False)])
def test_a_borrowing_project_gives_gpus_back_after_the_minimum_runtime(
        settings, nodes, sent, django_capture_on_commit_callbacks, ran, reclaimed) -> None:
    settings.SCHEDULER_FAIR_SHARE = True
    settings.SCHEDULER_RECLAIM_MIN_RUNTIME = 600.0
    borrower, waiter = make_user("bo"), make_user("wu")
    _member(borrower, "big")
    _member(waiter, "small")
    nodes(("n1", 2))
    running = [submit(borrower, f"b{i}") for i in range(2)]
    assert sorted(_cycle(django_capture_on_commit_callbacks).applied.started) == sorted(j.pk for j in running)
    earlier = timezone.now() - timedelta(seconds=ran)
    Attempt.objects.filter(job__in=running).update(started_at=earlier, state=AttemptState.RUNNING)
    Job.objects.filter(pk__in=[j.pk for j in running]).update(state=JobState.RUNNING, started_at=earlier)
    wanting = submit(waiter, "w")
    report = _cycle(django_capture_on_commit_callbacks)
    assert len(report.applied.preempted) == (1 if reclaimed else 0)
    states = sorted(Job.objects.filter(pk__in=[j.pk for j in running]).values_list("state", flat=True))
    assert states == ([JobState.PREEMPTING, JobState.RUNNING] if reclaimed else [JobState.RUNNING] * 2)
    wanting.refresh_from_db()
    assert wanting.state == JobState.PENDING
    assert wanting.pending_reason == ("WaitingForPreemption" if reclaimed else "Resources")


def test_without_the_setting_the_snapshot_carries_no_tenants_but_each_jobs_project(settings, nodes) -> None:
    from scheduler import snapshot

    user = make_user("ann")
    _member(user, "vision")
    nodes(("n1", 1))
    submit(user, "a")
    settings.SCHEDULER_FAIR_SHARE = False
    cycle = snapshot.build(timezone.now())
    assert cycle.snapshot.tenants is None
    assert [(p.spec.tenant, p.spec.user) for p in cycle.snapshot.pending] == [("vision", str(user.pk))]
    settings.SCHEDULER_FAIR_SHARE = True
    assert set(snapshot.build(timezone.now()).snapshot.tenants) == {"vision"}


def test_the_api_and_job_page_show_the_projects_fair_share_factor_while_on(settings, roles, api_as, browser_as):
    vision = _member(roles.owner, "vision")
    _member(roles.other, "nlp")
    _past_attempt(roles.owner, vision, 4, started_ago=HOUR, ended_ago=0.0)
    _past_attempt(roles.other, Project.objects.get(name="nlp"), 4, started_ago=HOUR / 4, ended_ago=0.0)
    job = submit(roles.owner, "waits")
    settings.SCHEDULER_FAIR_SHARE = False
    assert api_as(roles.owner).get(f"/api/v1/jobs/{job.pk}/").json()["priority_factors"]["fair_share"] is None
    settings.SCHEDULER_FAIR_SHARE = True
    factor = api_as(roles.owner).get(f"/api/v1/jobs/{job.pk}/").json()["priority_factors"]["fair_share"]
    assert 0.0 < factor < 0.5  # vision used more than its half lately
    listed = api_as(roles.owner).get("/api/v1/jobs/").json()["results"][0]["priority_factors"]["fair_share"]
    assert listed == pytest.approx(factor, rel=1e-3)
    page = browser_as(roles.owner).get(f"/jobs/{job.pk}/").content.decode()
    assert f"fair share {factor:.3f}"[:16] in page


def test_the_database_sums_what_python_sums() -> None:
    """PostgreSQL sums the window's attempts (``_sql_sums``); elsewhere Python does (``_python_sums``):
    the same figures, over attempts running, ended, beyond the horizon, on several nodes, without GPUs."""
    from django.db import connection

    alice, bob = make_user("alice"), make_user("bob")
    vision = _member(alice, "vision")
    _past_attempt(alice, vision, 2, started_ago=2 * HOUR, ended_ago=HOUR)
    _past_attempt(alice, vision, 4, started_ago=HOUR, ended_ago=None)
    _past_attempt(bob, None, 1, started_ago=30 * HOUR, ended_ago=25 * HOUR)  # beyond the horizon
    empty = _past_attempt(bob, None, 1, started_ago=HOUR, ended_ago=None)
    Attempt.objects.filter(pk=empty.pk).update(gpu_allocation={})  # no GPUs
    spread = _past_attempt(bob, None, 3, started_ago=3 * HOUR, ended_ago=0.5 * HOUR)
    Attempt.objects.filter(pk=spread.pk).update(gpu_allocation={"n1": [0, 1], "n2": [5]})
    _past_attempt(bob, None, 2, started_ago=-HOUR, ended_ago=None)  # starts later: not yet
    ended_early = _past_attempt(bob, None, 2, started_ago=HOUR, ended_ago=2 * HOUR)  # ends before it starts
    Attempt.objects.filter(pk=ended_early.pk).update(gpu_allocation=[])  # not an object: no GPUs
    now = timezone.now()
    python = fair_usage._python_sums(now, HOUR)
    assert connection.vendor == "postgresql"
    database = fair_usage._sql_sums(now, HOUR)
    assert set(database) == set(python) == {(vision.pk, alice.pk), (None, bob.pk)}
    for key, used in python.items():
        assert database[key] == pytest.approx(used, rel=1e-9)
