"""Which portal URLs reach a session's server, and the refusals of paths that could escape it.

Everything under ``/sessions/<job id>/`` is forwarded unchanged to that
job's session server (its base URL is the same prefix), except the terminal
page (``/sessions/<job id>/terminal/...``, a portal page). The path is
forwarded as the browser sent it (``raw_path``), after refusing what could
make the session's server, or anything between, read it as another path:
``.`` and ``..`` segments (plain or percent-encoded), encoded slashes,
backslashes (plain or encoded) and control characters (plain or encoded).
The destination's host and port come from the database only, so an absolute
URL in the request line cannot change where a request goes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote

PREFIX = "/sessions/"
_SESSION_RE = re.compile(r"/sessions/([1-9][0-9]{0,17})/(.*)", re.DOTALL)
# Served by the portal itself (the terminal page), never proxied.
_PORTAL_PAGES_RE = re.compile(r"terminal(/.*)?", re.DOTALL)
_ENCODED_SEPARATORS = re.compile(r"%(2f|5c|[01][0-9a-f]|7f)", re.IGNORECASE)


class BadSessionPath(ValueError):
    """A session URL that could reach something else than its session's server (a 400)."""


@dataclass(frozen=True)
class SessionPath:
    job_id: int
    raw_path: str  # as received, percent-encoding kept: what the session's server gets
    query: str  # the raw query string, "" when none


def is_proxied(path: str) -> bool:
    """Whether ``path`` (decoded, as routing sees it) belongs to a session's server."""
    m = _SESSION_RE.fullmatch(path)
    return m is not None and _PORTAL_PAGES_RE.fullmatch(m.group(2)) is None


def parse(scope: dict[str, Any]) -> SessionPath:
    """The job and the path to forward of an ASGI ``scope``; BadSessionPath for a path trick."""
    raw = scope.get("raw_path")
    raw_path = raw.decode("latin-1") if raw else quote(scope["path"], safe="/:@!$&'()*+,;=-._~%")
    raw_path = raw_path.split("?", 1)[0]
    m = _SESSION_RE.fullmatch(raw_path)
    if m is None:
        raise BadSessionPath("not a session URL: /sessions/<job id>/...")
    if _ENCODED_SEPARATORS.search(raw_path) or "\\" in raw_path:
        raise BadSessionPath("encoded slashes, backslashes and control characters are refused in session URLs")
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in raw_path):
        raise BadSessionPath("control characters are refused in session URLs")
    for segment in raw_path.split("/"):
        if unquote(segment) in (".", ".."):
            raise BadSessionPath("'.' and '..' path segments are refused in session URLs")
    query = (scope.get("query_string") or b"").decode("latin-1")
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in query):
        raise BadSessionPath("control characters are refused in session URLs")
    return SessionPath(job_id=int(m.group(1)), raw_path=raw_path, query=query)
