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
    return [(j["id"], j["position"]) for j in queue_by_class(user, timezone.now())["BE"]["jobs"]]


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
