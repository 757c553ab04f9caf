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

A refusal is logged and recorded in the audit log by the caller.
"""

from __future__ import annotations

import hashlib
import hmac

from django.conf import settings

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


def token_matches(node: str, token: object) -> bool:
    expected = expected_token(node)
    if expected is None:
        return True
    if expected == REFUSE_ALL:
        return False
    return isinstance(token, str) and hmac.compare_digest(token.encode(), expected.encode())


class AgentAuthError(Exception):
    """A report did not carry the configured agent token."""


def check_token(node: str, token: object) -> None:
    """Raise AgentAuthError unless ``token`` is the token of ``node`` (see cluster/auth.py:
    the node's own token when AGENT_SECRET is set, else AGENT_TOKEN; no check when neither is)."""
    if not token_matches(node, token):
        if expected_token(node) == REFUSE_ALL:
            raise AgentAuthError(f"report from node {node!r} refused: no GPUSCHED_AGENT_SECRET is set, so only "
                                 "per-node tokens could be accepted (GPUSCHED_AGENT_DEV_MODE=true accepts the "
                                 "shared token, for development only)")
        raise AgentAuthError(f"report from node {node!r} refused: wrong or missing agent token")
