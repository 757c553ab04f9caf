"""Quotas against the GPUs jobs actually hold: a reconfigurable job started on more GPUs than
it asked, grown by a Reconfigure, or relaunched on its pinned target is charged those GPUs."""

from __future__ import annotations

import pytest
from django.utils import timezone

from cluster import protocol
from scheduler import selectors, snapshot
from scheduler.core.decisions import Reason, Reconfigure, Start
from scheduler.core.model import Placement
from scheduler.core.policy import make_policy
from scheduler.models import Attempt, Job, JobState, Quota
from tests.support.live_helpers import submit
from tests.scheduler.test_reconfigure import Scripted, cycle, elastic_job, exit_on, run

pytestmark = pytest.mark.django_db


def started(capture, job: Job, node: str, gpus: int, plan: str = "") -> Job:  # noqa: ANN001
    """Start ``job`` on ``gpus`` GPUs of ``node`` and report it running."""
    report = cycle(capture, Scripted(Start(str(job.pk), Placement.of({node: gpus}), plan=plan)))
    assert report.applied.started == [job.pk]
    job.refresh_from_db()
    run(job, node)
    job.refresh_from_db()
    return job


def grow(job: Job, node: str, gpus: int) -> Reconfigure:
    return Reconfigure(str(job.pk), Placement.of({node: gpus}), "ga", reason=Reason.GROWN, message="grown")


def held(user) -> int:  # noqa: ANN001
    """The GPUs the quota endpoint's body says ``user`` holds."""
    return selectors.quota_report(user)["own_usage"]["gpus"]


def test_a_grow_beyond_the_quota_is_held_and_the_job_keeps_running(
    alice, nodes, sent, no_triggers, django_capture_on_commit_callbacks
) -> None:
    nodes(("n1", 8))
    Quota.objects.create(user=alice, max_gpus=4)
    job = started(django_capture_on_commit_callbacks, elastic_job(alice), "n1", 2, "ga")
    other = started(django_capture_on_commit_callbacks, submit(alice, "other", num_gpus=2), "n1", 2)
    sent.clear()

    report = cycle(django_capture_on_commit_callbacks, Scripted(grow(job, "n1", 4)))
    assert report.applied.reconfigured == []
    ((skipped_id, why),) = report.applied.skipped
    assert skipped_id == str(job.pk)
    assert why == "QuotaExceeded: user alice holds 4 of 4 GPUs; growing this job to 4 GPUs needs 2 more"
    job.refresh_from_db()
    assert (job.state, job.target_gpus, job.reconfiguration_count) == (JobState.RUNNING, 0, 0)
    assert not Attempt.objects.filter(job=job, notice_at__isnull=False).exists()
    assert sent.items == []
    assert held(alice) == 4 and other.state == JobState.RUNNING


def test_a_grow_within_the_quota_proceeds_and_its_target_is_charged_while_it_checkpoints(
    alice, nodes, sent, no_triggers, django_capture_on_commit_callbacks
) -> None:
    nodes(("n1", 8))
    Quota.objects.create(user=alice, max_gpus=4)
    job = started(django_capture_on_commit_callbacks, elastic_job(alice), "n1", 2, "ga")
    waiting = submit(alice, "waiting", num_gpus=2)  # fits next to 2 held GPUs, not next to 4
    sent.clear()

    # The grow comes first in the policy's order, so the start after it sees its 2 extra GPUs.
    report = cycle(django_capture_on_commit_callbacks,
                   Scripted(grow(job, "n1", 4), Start(str(waiting.pk), Placement.of({"n1": 2}))))
    assert report.applied.reconfigured == [job.pk] and report.applied.started == []
    waiting.refresh_from_db()
    assert (waiting.state, waiting.pending_reason) == (JobState.PENDING, "QuotaExceeded")
    job.refresh_from_db()
    assert job.state == JobState.PREEMPTING and 2 < job.target_gpus <= 4
    assert held(alice) == 4  # 2 held, growing to 4: the target keeps its room
    hold = next(p for p in snapshot.build(timezone.now()).snapshot.pending if p.spec.id == str(waiting.pk))
    assert hold.hold_reason == "QuotaExceeded"

    exit_on(job, "n1", 1, reason=protocol.EXIT_PREEMPT, code=143)
    job.refresh_from_db()
    assert job.state == JobState.PENDING and held(alice) == 0
    report = cycle(django_capture_on_commit_callbacks, make_policy("fifo"))  # the pinned relaunch on 4 GPUs
    assert report.applied.started == [job.pk]
    job.refresh_from_db()
    run(job, "n1")
    assert Attempt.objects.get(job=job, number=2).gpu_count == 4
    assert selectors.quota_report(alice)["usage"]["max_gpus"] == 4  # held GPUs, not the 2 asked
    # ... so the 2-GPU job still waits, also in the snapshot the policy sees.
    hold = next(p for p in snapshot.build(timezone.now()).snapshot.pending if p.spec.id == str(waiting.pk))
    assert hold.hold_reason == "QuotaExceeded" and "holds 4 of 4 GPUs" in hold.hold_message


def test_a_shrink_is_applied_even_over_the_quota(
    alice, nodes, sent, no_triggers, django_capture_on_commit_callbacks
) -> None:
    nodes(("n1", 8))
    job = started(django_capture_on_commit_callbacks, elastic_job(alice), "n1", 4, "ga")
    started(django_capture_on_commit_callbacks, submit(alice, "other", num_gpus=2), "n1", 2)
    Quota.objects.create(user=alice, max_gpus=4)  # lowered below what runs: 6 held
    assert held(alice) == 6
    shrink = Reconfigure(str(job.pk), Placement.of({"n1": 2}), "ga", reason=Reason.SHRUNK_FOR_JOB, message="shrunk")
    report = cycle(django_capture_on_commit_callbacks, Scripted(shrink))
    assert report.applied.reconfigured == [job.pk] and report.applied.skipped == []
    assert held(alice) == 6  # the shrink frees its GPUs when the attempt has vacated
    exit_on(job, "n1", 1, reason=protocol.EXIT_PREEMPT, code=143)
    assert held(alice) == 2


def test_a_start_is_checked_with_the_gpus_of_its_placement(
    alice, nodes, sent, no_triggers, django_capture_on_commit_callbacks
) -> None:
    nodes(("n1", 8))
    Quota.objects.create(user=alice, max_gpus=4)
    started(django_capture_on_commit_callbacks, submit(alice, "other", num_gpus=2), "n1", 2)
    job = elastic_job(alice)  # asks 2 (fits), may run on up to 4 (does not fit)
    report = cycle(django_capture_on_commit_callbacks,
                   Scripted(Start(str(job.pk), Placement.of({"n1": 4}), plan="ga")))
    assert report.applied.started == []
    job.refresh_from_db()
    assert job.state == JobState.PENDING and job.pending_reason == "QuotaExceeded"
    assert "this job needs 4 more" in job.pending_message
    assert held(alice) == 2


def test_rubick_grows_a_job_only_within_its_owners_quota(
    perf_model_traces, alice, nodes, sent, no_triggers, django_capture_on_commit_callbacks
) -> None:
    """Free GPUs on the node: Rubick grows the 2-GPU job (up to 4 allowed; it grows a GPU at a
    time); while another 2-GPU job of the same user runs, a 4-GPU quota holds the grow and the
    job keeps running on 2."""
    rubick = make_policy("rubick")
    nodes(("n1", 8))
    Quota.objects.create(user=alice, max_gpus=4)
    job = started(django_capture_on_commit_callbacks, elastic_job(alice, allowed_plans=(), min_gpus=1, max_gpus=4),
                  "n1", 2, "ga")
    other = started(django_capture_on_commit_callbacks, submit(alice, "other", num_gpus=2), "n1", 2)

    report = cycle(django_capture_on_commit_callbacks, rubick)
    assert report.applied.reconfigured == []
    assert [jid for jid, why in report.applied.skipped if why.startswith("QuotaExceeded")] == [str(job.pk)]
    job.refresh_from_db()
    assert job.state == JobState.RUNNING and held(alice) == 4

    exit_on(other, "n1", 1, reason=None, code=0)
    report = cycle(django_capture_on_commit_callbacks, rubick)
    assert report.applied.reconfigured == [job.pk]
    job.refresh_from_db()
    assert job.state == JobState.PREEMPTING and 2 < job.target_gpus <= 4


def test_a_pinned_relaunch_is_held_at_its_target_not_its_request(
    alice, nodes, sent, no_triggers, django_capture_on_commit_callbacks
) -> None:
    nodes(("n1", 8))
    quota = Quota.objects.create(user=alice, max_gpus=4)
    job = started(django_capture_on_commit_callbacks, elastic_job(alice), "n1", 2, "ga")
    assert cycle(django_capture_on_commit_callbacks, Scripted(grow(job, "n1", 4))).applied.reconfigured == [job.pk]
    exit_on(job, "n1", 1, reason=protocol.EXIT_PREEMPT, code=143)
    Quota.objects.filter(pk=quota.pk).update(max_gpus=3)  # lowered while it checkpointed: 2 asked fit, 4 do not
    (pending,) = snapshot.build(timezone.now()).snapshot.pending
    assert pending.spec.num_gpus == 4
    assert pending.hold_reason == "QuotaExceeded" and "this job needs 4 more" in pending.hold_message
    report = cycle(django_capture_on_commit_callbacks, Scripted(Start(str(job.pk), Placement.of({"n1": 4}))))
    assert report.applied.started == []
    job.refresh_from_db()
    assert (job.state, job.pending_reason, job.target_gpus) == (JobState.PENDING, "QuotaExceeded", 4)
