"""The contract of interactive sessions between the server and the node agents (stdlib only).

A session is a job whose launch carries ``ENV_SESSION`` (its kind, e.g.
``jupyter`` or ``terminal``) in its ``env``. The agent then picks a free TCP
port on the node and a secret, gives them to the job with the address to
listen on and the URL prefix the portal proxies (``ENV_SESSION_*``), and once
that port accepts connections sends ``REPORT_SESSION`` (kwargs: node, job_id,
attempt, host, port, sealed_secret, signature) over the authenticated report channel.
The secret is kept on the server and in the agent's root-only files; it is
never logged, and the portal adds it to every request it forwards.

The broker never sees it: the launch also carries the server's public key
(``ENV_SESSION_REPORT_KEY``, taken out of the job's environment by the agent),
and the report carries the secret sealed to that key for this node, job and
attempt (``cluster.session_seal``). An agent given no key (a server older than
the key) sends ``secret`` in clear instead, which the server still accepts.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from cluster.protocol import ProtocolError, check_address

REPORT_SESSION = "cluster.session"

# In a launch's env: the session's kind; the agent reads it, the job sees it too.
ENV_SESSION = "GPUSCHED_SESSION"
# Given by the agent to a session's process.
ENV_SESSION_HOST = "GPUSCHED_SESSION_HOST"  # the address to listen on (the node's advertised address)
ENV_SESSION_PORT = "GPUSCHED_SESSION_PORT"
ENV_SESSION_SECRET = "GPUSCHED_SESSION_SECRET"  # required as "Authorization: token <secret>"
ENV_SESSION_BASE_URL = "GPUSCHED_SESSION_BASE_URL"  # "/sessions/<job id>/": every path the server answers
# In a session's launch env, from the server: its X25519 public key, to seal the secret to (the job never sees it).
ENV_SESSION_REPORT_KEY = "GPUSCHED_SESSION_REPORT_KEY"

_KIND_RE = re.compile(r"[a-z][a-z0-9-]{0,15}")
# secrets.token_urlsafe(32) is 43 characters of this alphabet.
_SECRET_RE = re.compile(r"[A-Za-z0-9_-]{32,128}")


def base_url(job_id: str | int) -> str:
    """The path prefix of a session: the portal proxies ``/sessions/<job id>/`` to it unchanged."""
    return f"/sessions/{job_id}/"


def session_kind(env: Mapping[str, str]) -> str:
    """The session kind a launch's ``env`` names ("" for a batch job); ProtocolError if malformed."""
    kind = env.get(ENV_SESSION, "")
    if kind and not _KIND_RE.fullmatch(kind):
        raise ProtocolError(f"env[{ENV_SESSION}]", f"must be a short lowercase word, got {kind!r}")
    return kind


def check_endpoint(kwargs: Mapping[str, Any], opener: Callable[[object], str | None] | None = None
                   ) -> tuple[str, int, str]:
    """``(host, port, secret)`` of a REPORT_SESSION; ProtocolError naming the field (never echoing the secret).

    The secret is ``opener(kwargs["sealed_secret"])`` when the report has one (``opener`` gives None for
    a value that does not open, a ProtocolError then), else the clear ``secret`` of an older agent."""
    host = check_address(kwargs.get("host") or "", "host")
    if not host:
        raise ProtocolError("host", "is required")
    port = kwargs.get("port")
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise ProtocolError("port", f"must be a TCP port, got {port!r}")
    if "sealed_secret" in kwargs:
        secret = opener(kwargs["sealed_secret"]) if opener is not None else None
        if secret is None:
            raise ProtocolError("sealed_secret", "does not open with this server's key for this node, job and "
                                                 "attempt (sealed to another server's key, for another session, "
                                                 "or altered on the way)")
    else:
        secret = kwargs.get("secret")
    if not isinstance(secret, str) or not _SECRET_RE.fullmatch(secret):
        raise ProtocolError("secret", "must be 32-128 characters of A-Z a-z 0-9 _ -")
    return host, port, secret
