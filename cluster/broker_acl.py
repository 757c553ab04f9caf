"""Per-node Redis ACL users: each agent may touch only its own command queue and append reports.

With one Redis password shared by every node, a compromised node can read the commands queued for
any other node (their jobs' commands and environment, which may hold their owners' API keys),
delete them, or empty the server's task queue. A Redis ACL user per node (Redis 7 or later, for
selectors) limits the agent to what it does:

* its command queue ``node.<name>`` and the kombu bookkeeping of the messages it holds unacked
  (kept under keys of its own, ``unacked_keys``; the agent's broker link names them): consume,
  ack, restore;
* the report queue: append only (``LPUSH`` through the anonymous exchange; it can neither read
  other nodes' reports nor delete the queue, nor bind its own queue to the reports' routing);
* the telemetry stream: append only (``XADD``).

Nothing else: no other key, no pub/sub channel, no administrative or scanning command.

A node's password is derived from ``GPUSCHED_AGENT_SECRET`` (like its agent token, under another
label), so the server can print and apply the users of every node without storing passwords, and
rotating the secret rotates them. The rules are plain data here; ``manage.py broker_acl`` applies
or prints them.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Iterable, Mapping, Sequence
from urllib.parse import quote, urlsplit, urlunsplit

from cluster.protocol import REPORT_QUEUE, node_queue
from cluster.telemetry_stream import STREAM_KEY

USER_PREFIX = "gpusched-node-"
_PASSWORD_LABEL = b"gpusched-broker-password-v1:"
# The node names the server accepts (cluster.models.NODE_NAME_VALIDATOR); none of these characters
# is special in an ACL key pattern, so a name can never widen its own rules.
_NODE_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
# kombu's routing tables: an exchange's bindings, and the copy that marks them permanent.
_BINDING_PREFIXES = ("_kombu.binding.", "_kombu.binding_permanent.")

# Commands every client needs to connect and run kombu's transactions. Key-less: they reach no data.
_SESSION = ("+ping", "+select", "+hello", "+auth", "+client|setname",
            "+multi", "+exec", "+discard", "+watch", "+unwatch")
# kombu guards its restore with a redis-py lock, released by a Lua script; the commands a script
# runs are checked against this same user (Redis 7), so a script reaches no more than the user.
_SCRIPTS = ("+evalsha", "+script|load")
# What the agent's consumer does with its own keys (kombu's Redis transport with ack emulation):
# BRPOP the queue, push a message back when it restores or rejects one, the unacked hash and its
# index, the restore mutex (SET NX / GET / DEL), its own queue's binding (declared on connect).
_OWN_KEYS = ("+brpop", "+lpush", "+rpush", "+llen", "+hset", "+hget", "+hdel", "+zadd", "+zrem",
             "+zrange", "+set", "+get", "+del", "+sadd", "+smembers", "+exists")


CLIENT_NAME_PREFIX = "gpusched-agent:"


class BrokerAclError(ValueError):
    """A node name that no ACL user can be made for."""


def user_name(node: str) -> str:
    """The Redis user of ``node``'s agent."""
    return USER_PREFIX + _checked(node)


def password(secret: str, node: str) -> str:
    """``node``'s Redis password: HMAC-SHA256 of the node name under the agent secret (hex)."""
    if not secret:
        raise BrokerAclError("GPUSCHED_AGENT_SECRET is not set: node broker passwords derive from it")
    return hmac.new(secret.encode(), _PASSWORD_LABEL + _checked(node).encode(), hashlib.sha256).hexdigest()


def unacked_keys(node: str) -> dict[str, str]:
    """kombu transport options that keep ``node``'s unacked messages under keys of its own (the
    shared defaults would let every consumer read every other's messages in flight)."""
    # ':' is in no node name, so these keys are no other node's queue ("node.a.unacked" could be).
    base = node_queue(_checked(node))
    return {"unacked_key": f"{base}:unacked", "unacked_index_key": f"{base}:unacked_index",
            "unacked_mutex_key": f"{base}:unacked_mutex"}


def client_name(node: str) -> str:
    """The name ``node``'s agent gives its Redis connections (``CLIENT SETNAME``), by which
    ``agent_users`` finds them."""
    return CLIENT_NAME_PREFIX + _checked(node)


def agent_users(clients: Iterable[Mapping[str, str]]) -> dict[str, set[str]]:
    """From ``CLIENT LIST`` (as redis-py parses it): each connected agent's node, and the Redis users
    its connections are logged in as."""
    users: dict[str, set[str]] = {}
    for client in clients:
        name = client.get("name", "")
        if name.startswith(CLIENT_NAME_PREFIX):
            users.setdefault(name[len(CLIENT_NAME_PREFIX):], set()).add(client.get("user", ""))
    return users


def own_keys(node: str) -> list[str]:
    """Every key ``node``'s user may touch outside the report queue and the telemetry stream: its queue,
    its unacked bookkeeping, its queue's routing tables (what ``--revoke`` removes with the user)."""
    queue = node_queue(_checked(node))
    return [queue, *unacked_keys(node).values(), *(prefix + queue for prefix in _BINDING_PREFIXES)]


def rules(node: str, report_queue: str = REPORT_QUEUE) -> list[str]:
    """The ``ACL SETUSER`` rules of ``node``'s user, password excluded, starting from ``reset``.

    The root rules reach only the node's own keys; two selectors (Redis 7) grant one command each
    on the report queue and the telemetry stream.
    """
    return [
        "reset", "on", "resetchannels", "-@all", *_SESSION, *_SCRIPTS, *_OWN_KEYS,
        *(f"~{key}" for key in own_keys(node)),
        f"(%W~{report_queue} +lpush)",
        f"(%W~{STREAM_KEY} +xadd)",
    ]


def setuser_args(secret: str, node: str, report_queue: str = REPORT_QUEUE, fallbacks: Sequence[str] = ()) -> list[str]:
    """The arguments of ``ACL SETUSER`` that create or replace ``node``'s user with its password, and
    during a rotation of the agent secret also the password under each of ``fallbacks`` (Redis
    accepts any of a user's passwords), so that an agent not yet given its new URL keeps working."""
    return [user_name(node), *rules(node, report_queue), *(">" + p for p in _passwords(secret, node, fallbacks))]


def acl_file_line(secret: str, node: str, report_queue: str = REPORT_QUEUE, fallbacks: Sequence[str] = ()) -> str:
    """``node``'s user as a line of a Redis ACL file (``aclfile``), its passwords given as their
    SHA-256 so the file holds no password."""
    digests = ["#" + hashlib.sha256(p.encode()).hexdigest() for p in _passwords(secret, node, fallbacks)]
    kept = [rule for rule in rules(node, report_queue) if rule != "reset"]
    return " ".join(["user", user_name(node), "reset", *kept, *digests])


def _passwords(secret: str, node: str, fallbacks: Sequence[str]) -> list[str]:
    secrets = dict.fromkeys([secret, *(s for s in fallbacks if s)])  # the current first, each once
    return [password(s, node) for s in secrets]


def node_url(broker_url: str, secret: str, node: str) -> str:
    """``broker_url`` with ``node``'s user and password in place of any it carried."""
    parts = urlsplit(broker_url)
    if parts.scheme not in ("redis", "rediss"):
        raise BrokerAclError(f"broker URL: per-node users need a redis:// or rediss:// URL, not {parts.scheme}://")
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{quote(user_name(node), safe='')}:{password(secret, node)}@{host}"
    if parts.port is not None:
        netloc += f":{parts.port}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def _checked(node: str) -> str:
    if not isinstance(node, str) or not _NODE_NAME_RE.fullmatch(node):
        raise BrokerAclError(f"node: {node!r} is not a node name (letters, digits, '.', '_', '-'; at most 63)")
    return node
