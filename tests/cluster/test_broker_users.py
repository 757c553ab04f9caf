"""The agents' Redis users kept on a real redis-server without an aclfile: applied users are recorded, a
restart loses them, the safety tick creates them again (and the agents' URLs work again); a revoked node's
user is not restored; a broker that cannot be reached is logged, not raised."""

from __future__ import annotations

import logging
from io import StringIO

import pytest
import redis
from django.core.management import call_command

from cluster import broker_acl, broker_users, tick
from cluster.models import BrokerUser

pytestmark = [pytest.mark.django_db, pytest.mark.redis]
SECRET = "broker-users-secret"


def users(url: str) -> set[str]:
    return {name.decode() for name in redis.Redis.from_url(url).execute_command("ACL", "USERS")}


def can_log_in(url: str, node: str) -> bool:
    try:
        return bool(redis.Redis.from_url(broker_acl.node_url(url, SECRET, node)).ping())
    except redis.AuthenticationError:
        return False


@pytest.fixture
def broker(private_redis, settings, monkeypatch):  # noqa: ANN001, ANN201
    settings.CELERY_BROKER_URL = private_redis.url
    settings.AGENT_SECRET = SECRET
    monkeypatch.setattr(broker_users, "_client", None)
    monkeypatch.setattr(broker_users, "_last_check", float("-inf"))
    return private_redis


def apply(*args: str) -> None:
    call_command("broker_acl", *args, stdout=StringIO(), stderr=StringIO())


def test_users_lost_in_a_restart_are_created_again_and_a_revoked_one_is_not(broker, caplog) -> None:
    apply("--apply", "n1", "n2", "n3")
    apply("--revoke", "n3")
    assert set(BrokerUser.objects.values_list("node", flat=True)) == {"n1", "n2"}
    assert broker_users.keep(now=0.0) == []  # nothing lost: nothing done
    broker.restart()  # no aclfile: Redis comes back with its default user only
    assert users(broker.url) == {"default"} and not can_log_in(broker.url, "n1")
    with caplog.at_level(logging.WARNING, logger="cluster.broker_users"):
        assert broker_users.keep(now=100.0) == ["n1", "n2"]
    assert users(broker.url) == {"default", "gpusched-node-n1", "gpusched-node-n2"}
    assert can_log_in(broker.url, "n1") and can_log_in(broker.url, "n2") and not can_log_in(broker.url, "n3")
    assert "lost the Redis users of 2 node(s)" in caplog.text
    # what a restored user may do is what --apply gives: its own queue, not another's
    n1 = redis.Redis.from_url(broker_acl.node_url(broker.url, SECRET, "n1"))
    assert n1.lpush("node.n1", "x") == 1
    with pytest.raises(redis.exceptions.NoPermissionError):
        n1.llen("node.n2")


def test_the_check_runs_at_most_once_per_interval_in_a_process(broker) -> None:
    apply("--apply", "n1")
    assert broker_users.keep(now=1000.0) == []
    broker.restart()
    assert broker_users.keep(now=1000.0 + broker_users.CHECK_INTERVAL_S / 2) == []  # too soon: not looked at
    assert users(broker.url) == {"default"}
    assert broker_users.keep(now=1000.0 + broker_users.CHECK_INTERVAL_S) == ["n1"]


def test_the_safety_tick_restores_them(broker, settings, redis_url, no_triggers) -> None:  # noqa: ANN001
    settings.REDIS_URL = redis_url
    apply("--apply", "n1")
    broker.restart()
    assert tick.tick()["broker_users_restored"] == ["n1"]
    assert can_log_in(broker.url, "n1")


def test_without_an_agent_secret_or_a_reachable_broker_nothing_is_raised(broker, settings, caplog) -> None:
    apply("--apply", "n1")
    broker.stop()
    with caplog.at_level(logging.WARNING, logger="cluster.broker_users"):
        assert broker_users.keep(now=0.0) == []
    assert "could not check the agents' Redis users" in caplog.text
    settings.AGENT_SECRET = ""
    assert broker_users.keep(now=1000.0) == []
