"""Adaptive (Pollux) jobs on the live cluster's database: the request's rules, what the snapshot
gives the policy, the batch each start is told, and the ``pollux`` policy growing a job through
the reconfiguration path."""

from __future__ import annotations

import itertools
from datetime import timedelta

import numpy as np
import pytest
from django.utils import timezone

from cluster import protocol, reports
from jobprogress.services import record_progress
from scheduler import adaptive_jobs, elastic, loop, snapshot
from scheduler.core.decisions import Start
from scheduler.core.model import Placement
from scheduler.core.policies.pollux import Pollux
from scheduler.core.policy import make_policy
from scheduler.models import Attempt, AttemptState, Job, JobEvent, JobState
from scheduler.services import JobRequestInvalid
from tests.scheduler.test_reconfigure import Scripted, cycle, exit_on, run
from tests.support.live_helpers import allocation_problems, submit

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("pollux_profiles")]


def adaptive(owner, **fields):  # noqa: ANN001, ANN201
    values = {"adaptive_app": "cifar10", "num_gpus": 1, "max_gpus": 4, "grace_period": 10, **fields}
    return submit(owner, "adaptive", **values)


# --- the request --------------------------------------------------------------------------


@pytest.mark.parametrize(("fields", "field", "text"), [
    ({"adaptive_app": "resnet-9000"}, "adaptive_app", 'not a profile; known: bert, cifar10'),
    ({"adaptive_app": "bert", "model": "bert"}, "adaptive_app", "either adaptive or declares a model"),
    ({"adaptive_app": "cifar10", "num_gpus": 2, "max_gpus": 1}, "max_gpus", "at least num_gpus (2)"),
    ({"adaptive_app": "cifar10", "max_gpus": 65}, "max_gpus", "at most"),
    ({"adaptive_app": "cifar10", "job_class": "TE"}, "adaptive_app", "Only BE jobs can be adaptive."),
])
def test_a_bad_adaptive_request_names_its_field_and_writes_nothing(alice, fields, field, text) -> None:
    with pytest.raises(JobRequestInvalid) as caught:
        submit(alice, "bad", **fields)
    assert any(text in m for m in caught.value.errors[field]), caught.value.errors
    assert not Job.objects.exists()


def test_an_adaptive_request_is_stored_normalized(alice) -> None:
    job = adaptive(alice, adaptive_app=" CIFAR10 ", max_gpus=3)
    job.refresh_from_db()
    assert (job.adaptive_app, job.num_gpus, job.max_gpus, job.model) == ("cifar10", 1, 3, "")
    plain = submit(alice, "plain", max_gpus=None)
    assert plain.adaptive_app == "" and plain.max_gpus == 0


def test_without_profiles_an_adaptive_request_is_refused(alice, settings, tmp_path) -> None:
    settings.GPUSCHED_TRACES_DIR = str(tmp_path)
    adaptive_jobs.reset_cache()
    with pytest.raises(JobRequestInvalid) as caught:
        adaptive(alice)
    assert caught.value.errors["adaptive_app"] == ["This cluster has no adaptive-job profiles."]


# --- the model's numbers ------------------------------------------------------------------


def test_progress_follows_the_reported_epoch_linearly_within_an_epoch(alice) -> None:
    model = adaptive_jobs.model_for(adaptive(alice))
    bounds = model.bounds
    assert adaptive_jobs.progress_at(model, None) == 0.0
    assert adaptive_jobs.progress_at(model, 0.5) == pytest.approx(bounds[1] / 2)
    assert adaptive_jobs.progress_at(model, 2.25) == pytest.approx(bounds[2] + 0.25 * (bounds[3] - bounds[2]))
    assert adaptive_jobs.progress_at(model, 1e9) == pytest.approx(model.target)


@pytest.mark.parametrize(("per_node", "epoch"), [({"n1": 1}, 0), ({"n1": 2}, 40), ({"n1": 4, "n2": 4}, 90)])
def test_the_batch_told_is_the_one_with_the_most_goodput(alice, per_node, epoch) -> None:
    """Checked against the study's goodput (``Application.goodput``) over every candidate split."""
    model = adaptive_jobs.model_for(adaptive(alice, max_gpus=8))
    local, steps, batch = adaptive_jobs.configuration(model, per_node, epoch)
    gpus = sum(per_node.values())
    assert batch == gpus * local * steps
    placement = tuple(sorted(per_node.values(), reverse=True))
    atomics, accums, _ = model.configurations(gpus)
    goodputs = [model.app.goodput(placement, int(a), int(k), epoch) for a, k in zip(atomics, accums)]
    assert model.app.goodput(placement, local, steps - 1, epoch) == pytest.approx(max(goodputs), rel=1e-9)
    # ... and is what the simulator's Pollux reads for that allocation (its goodput table).
    assert max(goodputs) == pytest.approx(model.goodput_table(epoch)[len(per_node), gpus], rel=1e-9)


# --- the snapshot and the starts ----------------------------------------------------------


def test_the_snapshot_gives_the_policy_the_model_and_the_reported_progress(alice, nodes, sent, no_triggers,
                                                                           django_capture_on_commit_callbacks) -> None:
    nodes(("n1", 4))
    job = adaptive(alice)
    (pending,) = snapshot.build(timezone.now()).snapshot.pending
    assert pending.spec.adaptive is adaptive_jobs.model_for(job) and pending.progress == 0.0
    cycle(django_capture_on_commit_callbacks, Scripted(Start(str(job.pk), Placement.of({"n1": 3}))))
    job.refresh_from_db()
    run(job, "n1")
    record_progress(job.pk, 1, {"step": 10, "epoch": 12.5}, timezone.now())
    (running,) = snapshot.build(timezone.now()).snapshot.running
    assert running.placement.num_gpus == 3 and running.spec.num_gpus == 3  # more than asked, within its most
    assert running.progress == pytest.approx(adaptive_jobs.progress_at(running.spec.adaptive, 12.5))
    assert allocation_problems() == []


def test_a_start_tells_the_job_its_batch_and_a_resent_launch_says_the_same(alice, nodes, sent, no_triggers,
                                                                           django_capture_on_commit_callbacks) -> None:
    nodes(("n1", 4))
    job = adaptive(alice, num_gpus=2)
    cycle(django_capture_on_commit_callbacks, make_policy("fifo"))  # any policy: it runs as requested
    ((_, kw),) = sent.launches
    model = adaptive_jobs.model_for(job)
    local, steps, batch = adaptive_jobs.configuration(model, {"n1": 2}, 0)
    assert (kw["plan"], kw["num_gpus"], kw["grad_accum_steps"]) == ("ga", 2, steps)
    assert kw["env"] == {"GPUSCHED_BATCH_SIZE": str(batch), "GPUSCHED_LOCAL_BATCH_SIZE": str(local)}
    attempt = Attempt.objects.get(job=job, number=1)
    assert (attempt.plan, attempt.grad_accum_steps, attempt.batch_size) == ("ga", steps, batch)
    job.refresh_from_db()
    resent = elastic.attempt_launch_fields(job, attempt)
    assert {k: resent[k] for k in ("plan", "num_gpus", "grad_accum_steps", "env")} == {
        k: kw[k] for k in ("plan", "num_gpus", "grad_accum_steps", "env")}
    # The agent's side of the contract: the variables reach the job's environment.
    cmd = protocol.LaunchCommand.from_kwargs(kw)
    assert cmd.env["GPUSCHED_BATCH_SIZE"] == str(batch)


def test_pollux_grows_an_adaptive_job_through_a_checkpoint_with_a_larger_batch(
        alice, nodes, sent, no_triggers, django_capture_on_commit_callbacks) -> None:
    nodes(("n1", 4))
    job = adaptive(alice, max_gpus=4)
    Job.objects.filter(pk=job.pk).update(submitted_at=timezone.now() - timedelta(hours=1))  # restarts pay off
    policy = Pollux(seed=0)
    cycle(django_capture_on_commit_callbacks, policy)  # first round: one GPU, as the paper's agent starts
    ((_, kw),) = sent.launches
    assert (kw["num_gpus"], kw["env"]["GPUSCHED_BATCH_SIZE"]) == (1, "128")  # cifar10's batch at epoch 0
    job.refresh_from_db()
    run(job, "n1")
    record_progress(job.pk, 1, {"step": 500, "epoch": 60.0}, timezone.now())

    sent.clear()
    report = cycle(django_capture_on_commit_callbacks, policy)
    assert report.applied.reconfigured == [job.pk]
    job.refresh_from_db()
    assert job.state == JobState.PREEMPTING and job.target_gpus == 2  # at most twice what it has run on
    event = JobEvent.objects.filter(job=job, to_state=JobState.PREEMPTING).get()
    assert event.reason == "Reconfigured" and event.message.startswith("ga on 1 GPU -> ga on 2 GPUs: pollux")
    assert exit_on(job, "n1", 1, reason=protocol.EXIT_PREEMPT, code=143) == AttemptState.RECONFIGURED

    sent.clear()
    cycle(django_capture_on_commit_callbacks, policy)
    launches = sent.launches
    gpus = sum(kw["num_gpus"] for _, kw in launches[:1])
    local, steps, batch = adaptive_jobs.configuration(adaptive_jobs.model_for(job), {"n1": gpus}, 60.0)
    assert gpus >= 2 and all(kw["resume"] for _, kw in launches)
    assert launches[0][1]["env"]["GPUSCHED_BATCH_SIZE"] == str(batch) and batch > 128
    second = Attempt.objects.get(job=job, number=2)
    assert (second.gpu_count, second.batch_size, second.grad_accum_steps) == (gpus, batch, steps)
    assert allocation_problems() == []


def test_a_reconfigure_beyond_an_adaptive_jobs_most_is_skipped(alice, nodes, sent, no_triggers,
                                                               django_capture_on_commit_callbacks) -> None:
    from scheduler.core.decisions import Reconfigure

    nodes(("n1", 4))
    job = adaptive(alice, max_gpus=2)
    cycle(django_capture_on_commit_callbacks, Scripted(Start(str(job.pk), Placement.of({"n1": 1}))))
    job.refresh_from_db()
    run(job, "n1")
    report = cycle(django_capture_on_commit_callbacks, Scripted(Reconfigure(str(job.pk), Placement.of({"n1": 3}), "")))
    assert report.applied.reconfigured == []
    job.refresh_from_db()
    assert job.state == JobState.RUNNING and job.target_gpus == 0


def test_goodput_of_every_epoch_grows_with_the_batch_the_job_is_told(alice) -> None:
    """Later epochs (larger gradient noise) get larger batches on the same GPUs, as in the paper."""
    model = adaptive_jobs.model_for(adaptive(alice))
    batches = [adaptive_jobs.configuration(model, {"n1": 1}, e)[2] for e in (0, 30, 60, 99)]
    assert batches == sorted(batches) and batches[-1] > batches[0]
    assert all(b == int(b) for b in itertools.chain(batches)) and np.all(np.array(batches) > 0)


def test_forecasts_run_with_adaptive_jobs_in_the_queue(alice, nodes, sent, no_triggers,
                                                       django_capture_on_commit_callbacks) -> None:
    from scheduler import forecast_store, forecasts

    nodes(("n1", 2))
    first = adaptive(alice, num_gpus=2, max_gpus=2)
    cycle(django_capture_on_commit_callbacks, make_policy("fifo"))
    first.refresh_from_db()
    run(first, "n1")
    record_progress(first.pk, 1, {"step": 5, "epoch": 3.0}, timezone.now())
    waiting = [adaptive(alice, num_gpus=1), submit(alice, "plain", num_gpus=2)]
    report = forecasts.recompute(timezone.now())
    assert report.pending == 2
    for job in waiting:
        stored = forecast_store.read_one(job.pk)
        assert stored is not None and stored.position >= 1


def test_the_snapshot_counts_what_each_adaptive_job_has_held(alice, nodes, sent, no_triggers,
                                                             django_capture_on_commit_callbacks) -> None:
    """Pollux's attained service and "twice what it ran on" come from the attempts, not from the
    memory of whichever worker process runs the cycle."""
    nodes(("n1", 4))
    job = adaptive(alice, max_gpus=4)
    now = timezone.now()
    Attempt.objects.create(job=job, number=1, gpu_allocation={"n1": [0, 1, 2]}, state=AttemptState.RECONFIGURED,
                           started_at=now - timedelta(seconds=100), ended_at=now - timedelta(seconds=40))
    Attempt.objects.create(job=job, number=2, gpu_allocation={"n1": [0]}, state=AttemptState.PREEMPTED,
                           started_at=now - timedelta(seconds=30), ended_at=now - timedelta(seconds=10))
    Job.objects.filter(pk=job.pk).update(attempt_count=2)
    (pending,) = snapshot.build(now).snapshot.pending
    assert (pending.attained, pending.most_gpus) == (pytest.approx(3 * 60 + 1 * 20), 3)
    fresh = [Pollux(seed=s) for s in (0, 1)]  # two worker processes: neither has seen the job before
    for policy in fresh:
        (start,) = [d for d in policy.decide(snapshot.build(now).snapshot, now.timestamp()) if isinstance(d, Start)]
        assert start.placement.num_gpus > 1  # up to twice the 3 GPUs it ran on, not one as for a new job
