"""Agent credentials: which token a report naming a node must carry.

Two modes, chosen by settings:

* ``AGENT_SECRET`` set: **per-node tokens**. Node N's token is
  ``HMAC-SHA256(AGENT_SECRET, "gpusched-agent-node:" + N)`` in hex; the server
  derives it, so no token table is kept. An agent holding N's token cannot
  pass for another node: a report naming node M must carry M's token. Print a
  node's token with ``manage.py agent_token N`` and give it to that node's
  agent only (``GPUSCHED_AGENT_TOKEN``). Changing the secret revokes every token.
* only ``AGENT_TOKEN`` set: one shared token for all agents (any holder may
  report for any node).
* neither: reports are not authenticated (development only).
"""

from __future__ import annotations

import hashlib
import hmac

from django.conf import settings

_CONTEXT = "gpusched-agent-node:"


def node_token(secret: str, node: str) -> str:
    """The per-node token of ``node`` under ``secret``."""
    return hmac.new(secret.encode(), (_CONTEXT + node).encode(), hashlib.sha256).hexdigest()


def expected_token(node: str) -> str | None:
    """The token a report naming ``node`` must carry under the current settings; None: no check."""
    if settings.AGENT_SECRET:
        return node_token(settings.AGENT_SECRET, node)
    return settings.AGENT_TOKEN or None


def token_matches(node: str, token: object) -> bool:
    expected = expected_token(node)
    if expected is None:
        return True
    return isinstance(token, str) and hmac.compare_digest(token.encode(), expected.encode())


class AgentAuthError(Exception):
    """A report did not carry the configured agent token."""


def check_token(node: str, token: object) -> None:
    """Raise AgentAuthError unless ``token`` is the token of ``node`` (see cluster/auth.py:
    the node's own token when AGENT_SECRET is set, else AGENT_TOKEN; no check when neither is)."""
    if not token_matches(node, token):
        raise AgentAuthError(f"report from node {node!r} refused: wrong or missing agent token")
