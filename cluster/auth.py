"""Agent credentials: which token a report naming a node must carry.

Chosen by settings:

* ``AGENT_SECRET`` set: **per-node tokens**. Node N's token is
  ``HMAC-SHA256(AGENT_SECRET, "gpusched-agent-node:" + N)`` in hex; the server
  derives it, so no token table is kept. An agent holding N's token cannot
  pass for another node: a report naming node M must carry M's token. Print a
  node's token with ``manage.py agent_token N`` and give it to that node's
  agent only (``GPUSCHED_AGENT_TOKEN``). Changing the secret revokes every token.
* no ``AGENT_SECRET``: every report is **refused**, unless development mode
  (``GPUSCHED_AGENT_DEV_MODE``) is on; then one shared token (``AGENT_TOKEN``)
  for all agents (any holder may report for any node), or no check at all
  when that is empty too. Test stacks and a single developer's machine only.

Agents sign each report with their token instead of sending it (``cluster.message_signing``), so no
token crosses the broker; a report carrying the token itself (an agent older than signing) is still
accepted. Once every agent signs, changing ``AGENT_SECRET`` revokes any token an old agent's reports
left in Redis's files.

**Rotating** ``AGENT_SECRET`` without losing a node: the old secret goes into
``AGENT_SECRET_FALLBACKS`` while agents get their new tokens one by one. Reports signed under either
are accepted, and each command is signed with the token the node's agent last signed with
(``cluster.agent_secret_in_use``), so an agent still on its old token keeps running its commands.
Emptying the fallbacks ends the rotation: old tokens are refused from then on.

A refusal is logged and recorded in the audit log by the caller.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable, Mapping
from typing import Any

from django.conf import settings

from cluster import agent_secret_in_use, message_signing

_CONTEXT = "gpusched-agent-node:"


def node_token(secret: str, node: str) -> str:
    """The per-node token of ``node`` under ``secret``."""
    return hmac.new(secret.encode(), (_CONTEXT + node).encode(), hashlib.sha256).hexdigest()


#: ``expected_token``'s answer when no token can be right: no secret and not in development mode.
REFUSE_ALL = ""


def expected_token(node: str) -> str | None:
    """The token a report naming ``node`` must carry under the current settings; None: no check;
    ``REFUSE_ALL``: every report is refused (production without ``AGENT_SECRET``)."""
    if settings.AGENT_SECRET:
        return node_token(settings.AGENT_SECRET, node)
    if not settings.GPUSCHED_AGENT_DEV_MODE:
        return REFUSE_ALL
    return settings.AGENT_TOKEN or None


def accepted_secrets() -> list[str]:
    """The secrets whose tokens are accepted: ``AGENT_SECRET``, then its fallbacks (a rotation); none
    without ``AGENT_SECRET``."""
    if not settings.AGENT_SECRET:
        return []
    fallbacks = getattr(settings, "AGENT_SECRET_FALLBACKS", ())
    return [settings.AGENT_SECRET, *(s for s in fallbacks if s and s != settings.AGENT_SECRET)]


def signing_token(node: str) -> str | None:
    """The token to sign a command to ``node`` with: ``expected_token``, except during a rotation, when
    it is the token under the secret the node's agent last signed a report with."""
    secrets = accepted_secrets()
    if len(secrets) > 1:
        return node_token(agent_secret_in_use.secret_of(node, secrets), node)
    return expected_token(node)


def token_matches(node: str, token: object) -> bool:
    """Whether ``token`` (sent by an agent older than signing) is ``node``'s token."""
    expected = expected_token(node)
    if expected is None:
        return True
    if expected == REFUSE_ALL or not isinstance(token, str):
        return False
    if not settings.AGENT_SECRET:
        return hmac.compare_digest(token.encode(), expected.encode())
    return _passes_with_a_token(node, lambda mine: hmac.compare_digest(token.encode(), mine.encode()))


def _passes_with_a_token(node: str, check: Callable[[str], bool]) -> bool:
    """Whether ``check`` passes with ``node``'s token under one of the accepted secrets (the current
    first); during a rotation, the secret that passed is noted, so that commands to the node go
    signed with the same token."""
    secrets = accepted_secrets()
    for secret in secrets:
        if check(node_token(secret, node)):
            if len(secrets) > 1:
                agent_secret_in_use.note(node, secret)
            return True
    return False


class AgentAuthError(Exception):
    """A report was not signed with (nor, from an older agent, carried) the configured agent token."""


def report_authentic(node: str, task: str, kwargs: Mapping[str, Any]) -> bool:
    """Whether the ``task`` report ``kwargs`` naming ``node`` is signed with ``node``'s token (or, from
    an agent older than signing, carries it); True when the settings check nothing."""
    if message_signing.SIGNATURE_FIELD not in kwargs:
        return token_matches(node, kwargs.get(message_signing.TOKEN_FIELD, ""))
    if settings.AGENT_SECRET:
        return _passes_with_a_token(node, lambda token: message_signing.verifies(token, task, kwargs))
    expected = expected_token(node)
    return expected is None or (expected != REFUSE_ALL and message_signing.verifies(expected, task, kwargs))


def check_report(node: str, task: str, kwargs: Mapping[str, Any]) -> None:
    """Raise AgentAuthError unless ``report_authentic`` (see cluster/auth.py: the node's own token when
    AGENT_SECRET is set, else AGENT_TOKEN; no check when neither is)."""
    if not report_authentic(node, task, kwargs):
        if expected_token(node) == REFUSE_ALL:
            raise AgentAuthError(f"report from node {node!r} refused: no GPUSCHED_AGENT_SECRET is set, so only "
                                 "per-node tokens could be accepted (GPUSCHED_AGENT_DEV_MODE=true accepts the "
                                 "shared token, for development only)")
        if message_signing.SIGNATURE_FIELD in kwargs:
            raise AgentAuthError(f"report from node {node!r} refused: its signature does not verify with the "
                                 "node's token (another node's token, or the report was altered)")
        raise AgentAuthError(f"report from node {node!r} refused: wrong or missing agent token")
