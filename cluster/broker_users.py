"""The agents' Redis users kept on the broker: recorded when applied, created again when Redis lost them.

``manage.py broker_acl --apply`` creates a node's user on Redis (``cluster.broker_acl``) and records the
node (``BrokerUser``); ``--revoke`` deletes both. Redis keeps its users across a restart only with an
``aclfile``; without one, a restart logs every such agent out (``WRONGPASS``) until someone applies
the users again. So the safety tick calls ``keep`` and, at most every ``CHECK_INTERVAL_S`` in each
worker process, compares the broker's users with the recorded nodes and creates the missing ones
(with the passwords of ``GPUSCHED_AGENT_SECRET`` and its fallbacks, as ``--apply`` does), then saves
them to the ``aclfile`` when there is one. A revoked node is no longer recorded, so it is not
restored.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable

import redis
from django.conf import settings

from cluster import broker_acl
from cluster.models import BrokerUser

log = logging.getLogger(__name__)

CHECK_INTERVAL_S = 15.0
_last_check = float("-inf")
_client: redis.Redis | None = None


def record(nodes: Iterable[str]) -> None:
    """Note that ``nodes`` have a user on the broker (``--apply``)."""
    for node in nodes:
        BrokerUser.objects.update_or_create(node=node, defaults={})


def forget(nodes: Iterable[str]) -> None:
    """Note that ``nodes`` no longer have one (``--revoke``)."""
    BrokerUser.objects.filter(node__in=list(nodes)).delete()


def missing(client: redis.Redis, nodes: Iterable[str]) -> list[str]:
    """The ``nodes`` whose user the broker at ``client`` does not have."""
    present = {name.decode() if isinstance(name, bytes) else str(name)
               for name in client.execute_command("ACL", "USERS")}
    return [node for node in nodes if broker_acl.user_name(node) not in present]


def restore(client: redis.Redis, nodes: Iterable[str], secret: str) -> list[str]:
    """Create the users of ``nodes`` the broker lost; returns those nodes. Saves them to the broker's
    ``aclfile`` when it has one (a Redis without one answers ``ACL SAVE`` with an error, ignored)."""
    lost = missing(client, nodes)
    for node in lost:
        client.execute_command("ACL", "SETUSER", *broker_acl.setuser_args(
            secret, node, fallbacks=settings.AGENT_SECRET_FALLBACKS))
    if lost:
        try:
            client.execute_command("ACL", "SAVE")
        except redis.ResponseError:
            pass
    return lost


def keep(now: float | None = None) -> list[str]:
    """The tick's step: restore the recorded nodes' users the broker lost, at most every
    ``CHECK_INTERVAL_S`` in this process; returns the nodes restored. Never raises: a broker that
    cannot be reached or refuses ACL (a server user without the right) is logged, and tried again."""
    global _last_check
    now = time.monotonic() if now is None else now
    if now - _last_check < CHECK_INTERVAL_S or not settings.AGENT_SECRET:
        return []
    _last_check = now
    nodes = list(BrokerUser.objects.order_by("node").values_list("node", flat=True))
    if not nodes:
        return []
    try:
        lost = restore(_broker(), nodes, settings.AGENT_SECRET)
    except redis.RedisError as exc:
        log.warning("could not check the agents' Redis users on the broker (%s); tried again in %.0f s",
                    exc, CHECK_INTERVAL_S)
        return []
    if lost:
        log.warning("the broker had lost the Redis users of %d node(s) (restarted without an aclfile?); "
                    "created again: %s", len(lost), ", ".join(broker_acl.user_name(n) for n in lost))
    return lost


def admin_client() -> redis.Redis:
    """A new connection to the broker as the server's own user (its default user, allowed ACL and
    CLIENT LIST)."""
    return redis.Redis.from_url(settings.CELERY_BROKER_URL, socket_timeout=5, socket_connect_timeout=5)


def _broker() -> redis.Redis:
    """This process's connection for ``keep``, made once."""
    global _client
    if _client is None:
        _client = admin_client()
    return _client
