"""Each project's fair-share standing: the figures the policies use, read from the database."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from scheduler import fair_standing, snapshot
from scheduler.core.fair_queue import FairView
from scheduler.models import Attempt, AttemptState, Job, JobState
from tests.scheduler.test_fair_usage import _member as member
from tests.support.live_helpers import make_user, submit

pytestmark = pytest.mark.django_db


def holding(owner, name: str, gpus: int, state: str = JobState.RUNNING, node: str = "n1") -> Job:  # noqa: ANN001
    """A job of ``owner`` holding ``gpus`` GPUs of ``node`` in ``state`` since an hour ago."""
    job = submit(owner, name, num_gpus=gpus)
    Job.objects.filter(pk=job.pk).update(state=state, attempt_count=1)
    Attempt.objects.create(job=job, number=1, gpu_allocation={node: list(range(gpus))}, state=AttemptState.RUNNING,
                           started_at=timezone.now() - timedelta(hours=1))
    return job


@pytest.fixture
def cluster(nodes, settings):  # noqa: ANN001, ANN201
    """Two projects on 8 GPUs, wanting 7 in all: vision (share 3) holds 4 and its pending job is held
    back by a dependency; nlp (share 1) holds 2, one of them being given back, and wants 2 more.
    Counting the held-back job or the GPU given back would change the entitlements."""
    settings.SCHEDULER_FAIR_SHARE = True
    nodes(("n1", 4), ("n2", 4))
    users = {"vic": make_user("vic"), "nia": make_user("nia"), "solo": make_user("solo")}
    member(users["vic"], "vision", share=3.0)
    member(users["nia"], "nlp")
    first = holding(users["vic"], "v-run", 4)
    holding(users["nia"], "n-run", 1, node="n2")
    holding(users["nia"], "n-stop", 1, state=JobState.PREEMPTING, node="n2")
    held = submit(users["vic"], "v-held", num_gpus=4, dependency=f"afterok:{first.pk}")
    Job.objects.filter(pk=held.pk).update(pending_reason="Dependency")  # as the last cycle wrote it
    submit(users["nia"], "n-wait", num_gpus=2)
    return users


def rows(viewer) -> dict[str, dict]:  # noqa: ANN001
    return {r["project"]: r for r in fair_standing.report(viewer)["rows"]}


def test_held_wanted_and_entitled_gpus_per_project(cluster) -> None:  # noqa: ANN001
    staff = make_user("root-like", is_staff=True)
    got = rows(staff)
    assert set(got) == {"vision", "nlp"}
    assert (got["vision"]["held_gpus"], got["vision"]["wanted_gpus"]) == (4, 4)  # the held-back job wants nothing
    assert (got["nlp"]["held_gpus"], got["nlp"]["wanted_gpus"]) == (2, 3)  # the GPU being given back is not wanted
    # 7 wanted of 8: each is entitled to what it wants (with the held-back job, vision 6 and nlp 2).
    assert got["vision"]["entitled_gpus"] == pytest.approx(4.0) and got["nlp"]["entitled_gpus"] == pytest.approx(3.0)
    assert got["vision"]["share_norm"] == pytest.approx(0.75)
    assert fair_standing.report(staff)["total_gpus"] == 8


def test_the_entitlements_are_those_the_next_cycle_uses(cluster) -> None:  # noqa: ANN001
    cycle = snapshot.build(timezone.now())
    view = FairView(cycle.snapshot, cycle.snapshot.tenants)
    held_back = {p.spec.id for p in cycle.snapshot.pending if p.hold_reason is not None}
    assert held_back == {str(Job.objects.get(name="v-held").pk)}
    got = rows(make_user("root-like", is_staff=True))
    for name in ("vision", "nlp"):
        assert got[name]["entitled_gpus"] == pytest.approx(view.entitled[name])
        assert got[name]["fair_share_factor"] == pytest.approx(view.factor[name], rel=1e-3)


def test_usage_decays_and_the_viewer_sees_their_own_part(cluster) -> None:  # noqa: ANN001
    got = rows(cluster["vic"])
    # 4 GPUs for the last hour, half-life an hour: 4 * h/ln2 * (1 - 1/2) GPU-seconds.
    assert got["vision"]["usage_gpu_hours"] == pytest.approx(4 / 0.6931471805599453 * 0.5, rel=1e-2)
    assert got["vision"]["your_usage_gpu_hours"] == pytest.approx(got["vision"]["usage_gpu_hours"])
    assert got["vision"]["fair_share_factor"] < 1.0


def test_each_user_sees_their_projects_and_staff_every_one(cluster) -> None:  # noqa: ANN001
    assert set(rows(cluster["vic"])) == {"vision"}
    assert set(rows(cluster["nia"])) == {"nlp"}
    assert rows(cluster["solo"]) == {}  # no project, and no job charged to none
    holding(cluster["solo"], "solo-run", 1, node="n2")
    assert set(rows(cluster["solo"])) == {"(none)"}
    assert set(rows(make_user("root-like", is_staff=True))) == {"vision", "nlp", "(none)"}


def test_with_fair_share_off_the_report_says_so(cluster, settings) -> None:  # noqa: ANN001
    settings.SCHEDULER_FAIR_SHARE = False
    body = fair_standing.report(cluster["vic"])
    assert body["enabled"] is False and body["rows"][0]["project"] == "vision"


@pytest.mark.redis
def test_one_computation_serves_every_viewer_until_it_expires(cluster, settings, redis_url) -> None:  # noqa: ANN001
    import redis

    client = redis.Redis.from_url(redis_url)
    client.delete(fair_standing.CACHE_KEY)
    settings.FAIR_STANDING_CACHE_SECONDS = 10
    try:
        first = rows(cluster["vic"])
        assert 0 < client.ttl(fair_standing.CACHE_KEY) <= 10
        holding(cluster["vic"], "v-more", 2, node="n2")
        # Another viewer within the window: the same figures, their own part of the usage.
        again = rows(cluster["vic"])
        assert again["vision"]["held_gpus"] == first["vision"]["held_gpus"] == 4
        assert rows(cluster["nia"])["nlp"]["your_usage_gpu_hours"] > 0
        client.delete(fair_standing.CACHE_KEY)  # as if it had expired
        assert rows(cluster["vic"])["vision"]["held_gpus"] == 6
    finally:
        client.delete(fair_standing.CACHE_KEY)


def test_without_redis_the_standing_is_computed_for_the_request(cluster, settings) -> None:  # noqa: ANN001
    settings.FAIR_STANDING_CACHE_SECONDS = 10
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens on port 1
    assert rows(cluster["vic"])["vision"]["held_gpus"] == 4
