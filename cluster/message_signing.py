"""Messages signed with the node's token instead of carrying it: reports, and the commands to the node.

Every message crosses Redis, where it waits in a queue, lands in the append-only file and its
backups, and can be read and written by any process holding the Redis password (each node holds
it). A report that carried its node's token handed that token to every such reader, who could then
report as that node; a command that carried nothing could be written into any node's queue by any
of them, and a launch runs a command as the job's user. So both directions are signed with the
node's token, which never travels:

* a **report** carries ``signature``: HMAC-SHA256 under the token of the task name and the kwargs
  in a canonical JSON form (below), with ``signed_at`` (the sender's clock) among the signed
  kwargs. The server recomputes it with the token it derives for the named node
  (``cluster.auth``): a report changed on the way, moved to another task, or naming another node
  does not verify;
* a **command** to node N is signed by the server the same way with N's token, and N's agent runs
  only commands whose signature verifies with its own token: another node, which knows only its
  own token, cannot write a command N obeys.

Canonical form: the kwargs as JSON decodes them on the receiving side (the same round trip the
broker makes: tuples become lists, keys strings), without ``signature`` and ``token``, then
``json.dumps`` with sorted keys, no spaces, ASCII only, after the domain line
``gpusched-message-v1`` and the task name (report and command names never coincide).

What a signature does not stop: a reader of the broker replaying a message as it was sent. Reports
are idempotent per attempt (a second "exited" of an attempt changes nothing) and log batches are
stored once per message id; a replayed launch of an attempt the agent has already seen is refused,
and other commands name an attempt.

Stdlib only: the agent imports this module, as the server does.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Mapping
from typing import Any

SIGNATURE_FIELD = "signature"
SIGNED_AT_FIELD = "signed_at"
TOKEN_FIELD = "token"
_DOMAIN = b"gpusched-message-v1\n"
_UNSIGNED = (SIGNATURE_FIELD, TOKEN_FIELD)


def canonical(task: str, kwargs: Mapping[str, Any]) -> bytes:
    """The bytes a message's signature covers (module doc). ValueError if the kwargs are not JSON."""
    as_received = json.loads(json.dumps({k: v for k, v in kwargs.items() if k not in _UNSIGNED}, allow_nan=False))
    body = json.dumps(as_received, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
    return _DOMAIN + task.encode() + b"\n" + body.encode()


def signature(token: str, task: str, kwargs: Mapping[str, Any]) -> str:
    """HMAC-SHA256 of ``canonical(task, kwargs)`` under ``token``, in hex."""
    return hmac.new(token.encode(), canonical(task, kwargs), hashlib.sha256).hexdigest()


def signed(token: str, task: str, kwargs: Mapping[str, Any], now: float) -> dict[str, Any]:
    """``kwargs`` to send: without the token, with ``signed_at`` and the signature over both.
    With no token (a development stack that checks none) the kwargs go unsigned and tokenless.
    The sender's token is never in what it sends."""
    out = {k: v for k, v in kwargs.items() if k not in _UNSIGNED}
    if not token:
        return out
    out[SIGNED_AT_FIELD] = now
    out[SIGNATURE_FIELD] = signature(token, task, out)
    return out


def verifies(token: str, task: str, kwargs: Mapping[str, Any]) -> bool:
    """Whether ``kwargs`` carry a signature of ``task`` and themselves under ``token``."""
    given = kwargs.get(SIGNATURE_FIELD)
    if not isinstance(given, str) or not token:
        return False
    try:
        expected = signature(token, task, kwargs)
    except (TypeError, ValueError):  # not JSON-encodable: nothing an agent could have signed
        return False
    return hmac.compare_digest(given.encode(), expected.encode())
