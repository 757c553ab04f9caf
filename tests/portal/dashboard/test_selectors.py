"""The cluster page's queue lists pending jobs in the order the scheduler considers them."""

from __future__ import annotations

import pytest
import redis
from django.utils import timezone

from portal.dashboard import selectors
from portal.dashboard.selectors import queue_by_class
from scheduler import forecast_store

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def no_heads(redis_url):  # noqa: ANN001, ANN201
    """No queue head stored by an earlier test."""
    client = redis.Redis.from_url(redis_url)
    client.delete(forecast_store.HEADS_KEY, forecast_store.AT_KEY, forecast_store.HASH_KEY)
    yield
    client.delete(forecast_store.HEADS_KEY, forecast_store.AT_KEY, forecast_store.HASH_KEY)


def listed(user) -> list[tuple[int, int]]:  # noqa: ANN001
    return [(j["id"], j["position"]) for j in queue_by_class(user)["BE"]["jobs"]]


def test_the_queue_puts_higher_priority_first_then_submission_order(roles, make_job) -> None:  # noqa: ANN001
    early = make_job(roles.owner, state="PENDING", name="early", priority=0)
    urgent = make_job(roles.owner, state="PENDING", name="urgent", priority=100)
    late = make_job(roles.owner, state="PENDING", name="late", priority=0)
    low = make_job(roles.owner, state="PENDING", name="low", priority=-5)
    assert listed(roles.owner) == [(urgent.pk, 1), (early.pk, 2), (late.pk, 3), (low.pk, 4)]


def test_a_stored_head_orders_the_queue_and_later_submissions_follow_it(roles, make_job) -> None:  # noqa: ANN001
    # The head says what fair share decided: b before a. c was submitted after the head was stored;
    # d was in the head but has started since.
    a, b, d = (make_job(roles.owner, state="PENDING", name=n) for n in "abd")
    forecast_store.write({}, 50.0, {"BE": [b.pk, d.pk, a.pk]})
    d.state = "RUNNING"
    d.save(update_fields=["state"])
    c = make_job(roles.owner, state="PENDING", name="c")
    assert listed(roles.owner) == [(b.pk, 1), (a.pk, 2), (c.pk, 3)]


def test_a_head_job_beyond_the_listed_ones_is_fetched(roles, make_job, monkeypatch) -> None:  # noqa: ANN001
    # Only two jobs are listed; the head's first job is the last by arrival, so it is read apart.
    monkeypatch.setattr(selectors, "QUEUE_LIST_LIMIT", 2)
    a, b, c = (make_job(roles.owner, state="PENDING", name=n) for n in "abc")
    forecast_store.write({}, 50.0, {"BE": [c.pk, a.pk, b.pk]})
    assert listed(roles.owner) == [(c.pk, 1), (a.pk, 2)]


def test_utilization_is_each_bucket_s_mean_share_of_gpus_held_as_summed_second_by_second(
        roles, make_job, make_node) -> None:  # noqa: ANN001
    """Whole buckets are added as differences; the figures are those of adding every overlap directly."""
    import random
    from datetime import timedelta

    from scheduler.models import Attempt, AttemptState

    make_node("n1", 8)
    now = timezone.now().replace(microsecond=0)
    start = now - timedelta(seconds=selectors.UTILIZATION_WINDOW_S)
    rng = random.Random(7)
    spans = [(-600, None, 2, "BE"), (-600, 4000, 1, "TE"), (100, 160, 3, "BE"), (61, 119, 1, "TE"),
             (3590, None, 4, "BE"), (0, 3600, 1, "TE")]
    spans += [(rng.uniform(-900, 3500), rng.choice([None, rng.uniform(0, 3600)]), rng.randint(1, 8),
               rng.choice(["TE", "BE"])) for _ in range(40)]
    expected = {"TE": [0.0] * 60, "BE": [0.0] * 60}
    for number, (begin, end, gpus, job_class) in enumerate(spans, start=1):
        job = make_job(roles.owner, job_class=job_class)
        Attempt.objects.create(job=job, number=number, gpu_allocation={"n1": list(range(gpus))},
                               state=AttemptState.RUNNING, started_at=start + timedelta(seconds=begin),
                               ended_at=None if end is None else start + timedelta(seconds=end))
        lo, hi = max(begin, 0.0), min(3600.0 if end is None else end, 3600.0)
        for i in range(60):  # the overlap of [lo, hi) with bucket i, one bucket at a time
            expected[job_class][i] += gpus * max(0.0, min(hi, (i + 1) * 60.0) - max(lo, i * 60.0))
    series = selectors.utilization_series(now)
    assert series["capacity"] == 8
    for job_class in ("TE", "BE"):
        assert series[job_class] == [round(v / (8 * 60.0), 4) for v in expected[job_class]], job_class


def test_each_job_holding_gpus_is_listed_once_and_its_gpus_name_it(roles, make_job, make_node) -> None:  # noqa: ANN001
    from cluster.models import Gpu
    from scheduler.models import JobState

    make_node("n1", 4)
    theirs = make_job(roles.other, JobState.RUNNING, num_gpus=3, name="bobs-training", command="secret")
    mine = make_job(roles.owner, JobState.PREEMPTING, num_gpus=1, job_class="TE")
    Gpu.objects.filter(node__name="n1", index__in=[0, 1, 2]).update(allocated_to=theirs)
    Gpu.objects.filter(node__name="n1", index=3).update(allocated_to=mine)
    state = selectors.cluster_state(roles.owner)
    assert [g["job_id"] for g in state["nodes"][0]["gpus"]] == [theirs.pk] * 3 + [mine.pk]
    assert [g["status"] for g in state["nodes"][0]["gpus"]] == ["BE", "BE", "BE", "preempting"]
    assert set(state["jobs"]) == {str(theirs.pk), str(mine.pk)}
    bob = state["jobs"][str(theirs.pk)]
    assert (bob["name"], bob["owner"], bob["num_gpus"], bob["mine"], bob["url"]) == ("bobs-training", "bob", 3,
                                                                                     False, None)
    assert "command" not in bob and state["jobs"][str(mine.pk)]["url"] == f"/jobs/{mine.pk}/"
    assert selectors.cluster_state(roles.staff)["jobs"][str(theirs.pk)]["url"] == f"/jobs/{theirs.pk}/"
    assert state["totals"]["allocated"] == 4 and state["totals"]["preempting"] == 1
