"""GPU health: failures take a GPU out of service and requeue its job; the snapshot skips it; an admin returns it."""

from __future__ import annotations

import pytest
from django.utils import timezone

from cluster import gpu_health, protocol
from cluster.models import Gpu, GpuPolicy
from cluster.telemetry_schema import check_report
from scheduler import snapshot
from scheduler.models import JobEvent, JobState
from tests.support.live_helpers import make_node, make_user
from tests.support.placed_jobs import exit_report, placed_job

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def fresh_policy() -> None:
    gpu_health._cached = None


def gpus(**by_index):  # noqa: ANN003, ANN201
    """A report's GPUs: index -> extra fields."""
    return check_report(1.7e9, [{"i": int(i[1:]), "uuid": f"GPU-{i}", **f} for i, f in by_index.items()], []).gpus


def health(node: str = "n1") -> dict[int, tuple[bool, str]]:
    return {i: (ok, why) for i, ok, why in Gpu.objects.filter(node__name=node).values_list("index", "healthy",
                                                                                          "unhealthy_reason")}


def test_a_new_uncorrectable_ecc_error_takes_the_gpu_out_and_requeues_its_job(
        sent, no_triggers, django_capture_on_commit_callbacks) -> None:  # noqa: ANN001
    make_node("n1", 2)
    job = placed_job(make_user("alice"), {"n1": [0, 1]})
    with django_capture_on_commit_callbacks(execute=True):
        marked = gpu_health.check_telemetry("n1", gpus(g0={"ecc_dbe": 3, "ecc_dbe_new": 1}, g1={}), timezone.now())
    assert marked == [0]
    assert health()[0][0] is False and "uncorrectable ECC" in health()[0][1] and health()[1][0] is True
    job.refresh_from_db()
    assert job.state == JobState.PREEMPTING  # requeued through the preemption path, not failed
    event = JobEvent.objects.filter(job=job).latest("id")
    assert event.reason == gpu_health.REASON_UNHEALTHY and "n1:0" in event.message
    assert [(node, kw["job_id"]) for node, kw in sent.of(protocol.AGENT_PREEMPT)] == [("n1", job.pk)]
    exit_report(job, reason=protocol.EXIT_PREEMPT, exit_code=None, signal=15)
    job.refresh_from_db()
    assert job.state == JobState.PENDING


def test_an_xid_of_the_list_marks_a_gpu_and_one_outside_it_does_not(sent) -> None:  # noqa: ANN001
    make_node("n1", 2)
    GpuPolicy.objects.create(pk=1, unhealthy_xids="79")
    assert gpu_health.check_telemetry("n1", gpus(g0={"xid": [13]}, g1={"xid": [79]}), timezone.now()) == [1]
    assert health()[1] == (False, "Xid 79") and health()[0][0] is True
    # Marked once: a second report keeps the first reason.
    assert gpu_health.check_telemetry("n1", gpus(g1={"ecc_dbe_new": 1}), timezone.now()) == []
    assert health()[1] == (False, "Xid 79")


def test_the_snapshot_offers_no_unhealthy_gpu_and_returning_it_offers_it_again(no_triggers) -> None:  # noqa: ANN001
    make_node("n1", 4)
    gpu_health.mark_unhealthy("n1", 2, "Xid 79", timezone.now())
    assert snapshot.build(timezone.now()).snapshot.free["n1"][0] == 3
    assert gpu_health.return_to_service("n1", 2) is True
    assert gpu_health.return_to_service("n1", 2) is False  # already healthy
    assert snapshot.build(timezone.now()).snapshot.free["n1"][0] == 4
    assert health()[2] == (True, "")


def test_repeated_launch_failures_mark_the_gpus_and_a_success_resets_the_count(sent, no_triggers) -> None:  # noqa: ANN001
    make_node("n1", 2)
    owner = make_user("alice")
    for attempt in (1, 2):
        job = placed_job(owner, {"n1": [0]})
        exit_report(job, reason=protocol.EXIT_LAUNCH_FAILED, exit_code=None)
    assert Gpu.objects.get(node__name="n1", index=0).launch_failures == 2
    assert gpu_health.launch_succeeded("n1", [0]) is None
    assert Gpu.objects.get(node__name="n1", index=0).launch_failures == 0
    for attempt in range(3):
        job = placed_job(owner, {"n1": [0]})
        exit_report(job, reason=protocol.EXIT_LAUNCH_FAILED, exit_code=None)
    assert health()[0] == (False, "3 launch failures in a row")
