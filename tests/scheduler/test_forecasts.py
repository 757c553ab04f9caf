"""Live start-time forecasts: recomputed from the database as a cycle reads it,
stored in Redis with queue positions, learned from finished jobs, announced
when they change."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from scheduler import announce, forecast_store, forecasts, loop
from scheduler.models import Job, JobState
from scheduler.sim.forecast import ForecastLimits
from tests.support.live_helpers import submit

pytestmark = [pytest.mark.django_db, pytest.mark.redis]


@pytest.fixture
def store(redis_url, settings):  # noqa: ANN001, ANN201
    """The test Redis, without forecasts left from an earlier test."""
    import redis

    client = redis.Redis.from_url(redis_url)
    client.delete(forecast_store.HASH_KEY, forecast_store.AT_KEY, forecast_store.HEADS_KEY)
    yield client
    client.delete(forecast_store.HASH_KEY, forecast_store.AT_KEY, forecast_store.HEADS_KEY)


@pytest.fixture
def heard(monkeypatch):  # noqa: ANN001, ANN201
    calls: list[list[int]] = []

    class Recorder:
        def publish_forecasts_changed(self, job_ids):  # noqa: ANN001, ANN202
            calls.append(list(job_ids))

        def __getattr__(self, name):  # noqa: ANN001, ANN204 - the other announcements are not under test
            return lambda *args: None

    monkeypatch.setattr(announce, "_publishers", [Recorder()])
    return calls


def finish(job: Job, seconds: float, owner_state: str = JobState.COMPLETED) -> None:
    Job.objects.filter(pk=job.pk).update(state=owner_state, progress_seconds=seconds, ended_at=timezone.now())


def test_on_an_idle_cluster_a_fitting_job_is_forecast_now(alice, nodes, store, heard) -> None:
    nodes(("n1", 2))
    job = submit(alice, "a", num_gpus=2)
    now = timezone.now()
    report = forecasts.recompute(now)
    stored = forecast_store.read_one(job.pk)
    assert report.pending == 1 and stored is not None
    assert stored.start == pytest.approx(now.timestamp()) and stored.position == 1
    assert stored.computed_at == pytest.approx(now.timestamp())
    assert heard == [[job.pk]]


def test_a_queued_job_waits_for_the_running_job_to_reach_its_time_limit(
        alice, nodes, sent, store, heard, django_capture_on_commit_callbacks) -> None:
    nodes(("n1", 1))
    first = submit(alice, "first", time_limit=600)
    with django_capture_on_commit_callbacks(execute=True):
        loop.run_cycle()
    second = submit(alice, "second", time_limit=300)
    third = submit(alice, "third")
    now = timezone.now() + timedelta(seconds=100)
    forecasts.recompute(now, limits=ForecastLimits(step=0.0))  # exact event times
    first.refresh_from_db()
    started = first.started_at.timestamp()
    got = forecast_store.read([first.pk, second.pk, third.pk])
    assert first.pk not in got  # running: no forecast
    # No history: the time limits. first ends at its limit, then second runs its 300 s.
    assert got[second.pk].start == pytest.approx(started + 600, abs=1.0)
    assert got[third.pk].start == pytest.approx(started + 900, abs=1.0)
    assert (got[second.pk].position, got[third.pk].position) == (1, 2)


def test_history_of_the_owner_replaces_the_class_default(alice, nodes, store) -> None:
    nodes(("n1", 1))
    for i in range(30):  # the estimator trusts an owner's history from 30 runs on
        finish(submit(alice, f"old{i}"), 120.0)
    estimator = forecasts.history_estimator()
    spec_user = str(alice.pk)
    from scheduler.core.model import JobClass, JobSpec

    assert estimator.total(JobSpec("x", JobClass.BE, 1, 0.0, user=spec_user)) == 120.0


def test_jobs_no_longer_pending_leave_the_store_and_are_announced(alice, nodes, store, heard) -> None:
    nodes(("n1", 1))
    a, b = submit(alice, "a"), submit(alice, "b")
    forecasts.recompute()
    Job.objects.filter(pk=a.pk).update(state=JobState.CANCELLED)
    heard.clear()
    forecasts.recompute()
    assert forecast_store.read_one(a.pk) is None
    assert forecast_store.read_one(b.pk).position == 1
    assert set(heard[0]) == {a.pk, b.pk}  # a is gone; b moved up from position 2


def test_a_held_job_has_no_position_or_forecast_and_those_behind_it_move_up(alice, nodes, store) -> None:
    from scheduler import holds

    nodes(("n1", 1))
    running, held, behind = submit(alice, "running"), submit(alice, "held"), submit(alice, "behind")
    Job.objects.filter(pk=running.pk).update(state=JobState.RUNNING)
    forecasts.recompute()
    assert (forecast_store.read_one(held.pk).position, forecast_store.read_one(behind.pk).position) == (1, 2)
    holds.hold_job(held, alice)
    forecasts.recompute()
    assert forecast_store.read_one(held.pk) is None
    assert forecast_store.read_one(behind.pk).position == 1
    holds.release_job(held, alice)
    forecasts.recompute()
    assert forecast_store.read_one(held.pk).position == 1


@pytest.mark.parametrize("fair, order", [(True, ["light", "heavy1", "heavy2"]), (False, ["heavy1", "heavy2", "light"])])
def test_queue_positions_and_heads_follow_fair_share_when_it_is_on(nodes, store, settings, fair, order) -> None:
    # The heavy project used 8 GPUs for an hour; the light one nothing. With fair share, the light
    # project's job, submitted last, is the first the scheduler considers, and its position says so.
    from scheduler.models import Attempt, AttemptState
    from scheduler.projects import Membership, Project
    from tests.support.live_helpers import make_user

    settings.SCHEDULER_FAIR_SHARE = fair
    nodes(("n1", 1))
    users = {}
    for name in ("heavy", "light"):
        users[name] = make_user(f"u-{name}")
        Membership.objects.create(project=Project.objects.create(name=name), user=users[name], is_default=True)
    past = submit(users["heavy"], "past", num_gpus=1)
    Job.objects.filter(pk=past.pk).update(state=JobState.COMPLETED)
    Attempt.objects.create(job=past, number=1, gpu_allocation={"n0": list(range(8))}, state=AttemptState.COMPLETED,
                           started_at=timezone.now() - timedelta(hours=2), ended_at=timezone.now() - timedelta(hours=1))
    jobs = {"heavy1": submit(users["heavy"], "h1"), "heavy2": submit(users["heavy"], "h2"),
            "light": submit(users["light"], "l1")}
    forecasts.recompute()
    got = forecast_store.read(j.pk for j in jobs.values())
    assert sorted(jobs, key=lambda name: got[jobs[name].pk].position) == order
    assert forecast_store.read_heads()["BE"] == [jobs[name].pk for name in order]


def test_queue_positions_follow_the_configured_policy_s_own_order(alice, nodes, store, settings) -> None:
    # Under Tiresias a job that has already run 2 h on 1 GPU is demoted past its first threshold
    # (1 h of attained service): the fresh job submitted after it is considered first, and the
    # positions say so; under fitgpp (arrival order) they are the other way round.
    nodes(("n1", 1))
    ran = submit(alice, "ran")
    Job.objects.filter(pk=ran.pk).update(progress_seconds=7200.0, preemption_count=1)
    fresh = submit(alice, "fresh")
    for policy, order in (("tiresias", [fresh.pk, ran.pk]), ("fitgpp", [ran.pk, fresh.pk])):
        settings.SCHEDULER_POLICY = policy
        forecasts.recompute()
        got = forecast_store.read([ran.pk, fresh.pk])
        assert sorted(got, key=lambda pk: got[pk].position) == order, policy
        assert forecast_store.read_heads()["BE"] == order, policy


def test_unchanged_forecasts_announce_nothing(alice, nodes, store, heard) -> None:
    nodes(("n1", 1))
    submit(alice, "a")
    now = timezone.now()
    forecasts.recompute(now)
    forecasts.recompute(now)
    assert len(heard) == 1


def test_a_running_job_that_reports_its_steps_is_forecast_to_end_when_they_say(
        alice, nodes, sent, store, heard, django_capture_on_commit_callbacks) -> None:
    """Its time limit says 600 s; its own progress (50 steps left at 0.5 step/s) says 100 s."""
    from jobprogress import services as progress
    from scheduler.models import Attempt

    nodes(("n1", 1))
    first = submit(alice, "first", time_limit=600)
    with django_capture_on_commit_callbacks(execute=True):
        loop.run_cycle()
    Attempt.objects.filter(job=first).update(state="RUNNING")
    second = submit(alice, "second", time_limit=300)
    now = timezone.now()
    t = now.timestamp()
    progress.record_progress(first.pk, 1, {"t": t - 20, "step": 40, "total_steps": 100}, now)
    progress.record_progress(first.pk, 1, {"t": t - 10, "step": 45}, now)
    progress.record_progress(first.pk, 1, {"t": t, "step": 50}, now)
    forecasts.recompute(now, limits=ForecastLimits(step=0.0))
    assert forecast_store.read_one(second.pk).start == pytest.approx(t + 100, abs=1.0)


def test_a_job_that_depends_on_a_running_one_is_forecast_when_that_one_ends(
        alice, nodes, sent, store, heard, django_capture_on_commit_callbacks) -> None:
    nodes(("n1", 2))
    first = submit(alice, "first", time_limit=600)
    with django_capture_on_commit_callbacks(execute=True):
        loop.run_cycle()
    after = submit(alice, "after", time_limit=300, dependency=f"afterok:{first.pk}")
    unless = submit(alice, "unless", time_limit=300, dependency=f"afternotok:{first.pk}")
    with django_capture_on_commit_callbacks(execute=True):
        loop.run_cycle()  # holds both with the reason Dependency, though a GPU is free
    forecasts.recompute(timezone.now(), limits=ForecastLimits(step=0.0))
    first.refresh_from_db()
    got = forecast_store.read([after.pk, unless.pk])
    assert got[after.pk].start == pytest.approx(first.started_at.timestamp() + 600, abs=1.0)
    assert got[unless.pk].start is None  # a forecast assumes first succeeds


def test_an_array_task_held_by_its_limit_is_forecast_when_a_running_task_ends(
        alice, nodes, sent, store, heard, django_capture_on_commit_callbacks) -> None:
    from scheduler import services

    nodes(("n1", 4))
    reqs = [services.JobRequest(name=f"t{i}", command="true", time_limit=300) for i in range(3)]
    tasks = services.submit_jobs(alice, reqs, None, max_running=1)
    with django_capture_on_commit_callbacks(execute=True):
        loop.run_cycle()  # t0 starts; t1 and t2 wait for the limit though GPUs are free
    forecasts.recompute(timezone.now(), limits=ForecastLimits(step=0.0))
    started = Job.objects.get(pk=tasks[0].pk).started_at.timestamp()
    got = forecast_store.read([t.pk for t in tasks[1:]])
    assert got[tasks[1].pk].start == pytest.approx(started + 300, abs=1.0)
    assert got[tasks[2].pk].start == pytest.approx(started + 600, abs=1.0)


def test_a_small_cluster_s_forecast_is_the_median_over_every_draw_and_a_slow_one_makes_one_run(
        alice, nodes, store, heard, monkeypatch) -> None:
    nodes(("n1", 2))
    for i in range(30):
        finish(submit(alice, f"old{i}", num_gpus=2), 60.0 * (i + 1))
    jobs = [submit(alice, f"p{i}", num_gpus=2) for i in range(3)]
    now = timezone.now()
    report = forecasts.recompute(now, limits=ForecastLimits(step=0.0))
    assert report.draws == forecasts.FORECAST_DRAWS
    # The stored forecasts are the median of the runs with the sets of draws 0 to 6.
    from scheduler import snapshot
    from scheduler.core.runtime_estimate import with_draw
    from scheduler.sim.forecast import forecast_starts, median_starts

    cycle = snapshot.build(now)
    est = forecasts.history_estimator()
    runs = [forecast_starts(loop.current_policy(explain=False), cycle.snapshot, now.timestamp(), with_draw(est, k),
                            limits=ForecastLimits(step=0.0)) for k in range(forecasts.FORECAST_DRAWS)]
    assert len({tuple(sorted(r.items())) for r in runs}) > 1  # the draws are different futures
    expected = median_starts(runs)
    got = forecast_store.read([j.pk for j in jobs])
    assert {j.pk: got[j.pk].start for j in jobs} == {j.pk: pytest.approx(expected[str(j.pk)]) for j in jobs}

    monkeypatch.setattr(forecasts, "DRAW_BUDGET_S", 0.0)  # as if one run took the whole budget
    assert forecasts.recompute(now).draws == 1


def test_under_rubick_a_reconfigurable_job_started_at_another_size_is_forecast(
        perf_model_traces, alice, nodes, store, heard, settings) -> None:
    """Rubick starts a reconfigurable job on the GPUs it finds idle (here 7 of 8 for a request of 2,
    one left for the next job); the forecast runs the same policy, so it must let it (it failed as
    a policy bug, and no job was forecast)."""
    settings.SCHEDULER_POLICY = "rubick"
    nodes(("n1", 8))
    elastic = submit(alice, "elastic", model="bert", plan="ga", allowed_plans=("ga", "zero-dp"), num_gpus=2,
                     min_gpus=1, max_gpus=8)
    small = submit(alice, "small", num_gpus=1)
    now = timezone.now()
    report = forecasts.recompute(now)
    assert report.pending == 2
    assert forecast_store.read_one(elastic.pk).start == pytest.approx(now.timestamp())
    assert forecast_store.read_one(small.pk).start == pytest.approx(now.timestamp())


class StartsWithTooManyGpus:
    """A policy with a bug: it starts every pending job on one GPU more than it asked for."""

    def decide(self, snap, now):  # noqa: ANN001, ANN201
        from scheduler.core.decisions import Start
        from scheduler.core.model import Placement

        node = snap.nodes[0].name
        return [Start(p.spec.id, Placement.of({node: p.spec.num_gpus + 1})) for p in snap.pending]


def test_a_forecast_that_fails_withdraws_the_stored_ones_and_logs_its_cause_once(
        alice, nodes, store, heard, monkeypatch, caplog) -> None:
    nodes(("n1", 4))
    job = submit(alice, "a", num_gpus=1)
    forecasts.recompute(timezone.now())
    assert forecast_store.read_one(job.pk) is not None
    heard.clear()
    good = loop.current_policy
    monkeypatch.setattr(loop, "current_policy", lambda explain=True: StartsWithTooManyGpus())
    with caplog.at_level("ERROR", logger="scheduler.forecasts"):
        first = forecasts.recompute(timezone.now())
        again = forecasts.recompute(timezone.now())
    assert (first.pending, first.changed, again.changed) == (0, 1, 0)
    assert forecast_store.read_one(job.pk) is None  # no page shows the forecast made before
    assert heard == [[job.pk]]
    failures = [r.getMessage() for r in caplog.records if "forecasts failed" in r.getMessage()]
    assert len(failures) == 1 and "with 2 GPUs, the job needs 1" in failures[0]

    monkeypatch.setattr(loop, "current_policy", good)
    assert forecasts.recompute(timezone.now()).pending == 1
    assert forecast_store.read_one(job.pk) is not None
    monkeypatch.setattr(loop, "current_policy", lambda explain=True: StartsWithTooManyGpus())
    with caplog.at_level("ERROR", logger="scheduler.forecasts"):
        forecasts.recompute(timezone.now())
    assert len([r for r in caplog.records if "forecasts failed" in r.getMessage()]) == 2  # logged again after a success


def test_a_policy_that_raises_in_a_forecast_withdraws_them_too(alice, nodes, store, heard, monkeypatch,
                                                               caplog) -> None:
    class Raises:
        def decide(self, snap, now):  # noqa: ANN001, ANN201
            raise AttributeError("'LiveRunningJob' object has no attribute '_shape'")

    nodes(("n1", 4))
    job = submit(alice, "a", num_gpus=1)
    forecasts.recompute(timezone.now())
    monkeypatch.setattr(loop, "current_policy", lambda explain=True: Raises())
    with caplog.at_level("ERROR", logger="scheduler.forecasts"):
        report = forecasts.recompute(timezone.now())
    assert (report.pending, report.changed) == (0, 1) and forecast_store.read_one(job.pk) is None
    (record,) = [r for r in caplog.records if "forecasts failed" in r.getMessage()]
    assert "AttributeError" in record.getMessage() and record.exc_info is not None  # with its traceback
