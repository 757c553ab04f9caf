"""What the portal sends to a session's server and what it lets back: headers, the secret, time-outs.

Towards the server: the browser's headers minus its cookies (the portal's
session must never reach a job), its own ``Authorization``, the hop-by-hop
headers and ``Origin``/``Referer`` (the portal has checked the origin
itself; the server would compare them with its own host), plus
``Authorization: token <secret>``. Back to the browser: the server's headers
minus ``Set-Cookie`` (a job must not set cookies on the portal's domain),
the hop-by-hop headers and any header carrying the secret; bodies and
websocket frames go through ``Scrubber``, which masks the secret wherever it
appears (JupyterLab writes its token into its page, for one).
"""

from __future__ import annotations

from collections.abc import Iterable

import aiohttp
from django.conf import settings

_HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
                         "trailers", "transfer-encoding", "upgrade", "proxy-connection"})
_NOT_FORWARDED = _HOP_BY_HOP | {"host", "cookie", "authorization", "origin", "referer", "content-length",
                                "accept-encoding", "x-forwarded-for", "x-forwarded-host", "x-forwarded-proto",
                                "x-real-ip", "forwarded"}
_NOT_RETURNED = _HOP_BY_HOP | {"set-cookie", "set-cookie2", "content-length", "content-encoding"}


def connect_timeout() -> float:
    """Seconds to wait for a session server's TCP connection (``GPUSCHED_SESSION_CONNECT_TIMEOUT``)."""
    return float(getattr(settings, "GPUSCHED_SESSION_CONNECT_TIMEOUT", 5.0))


def read_timeout() -> float:
    """Seconds a session server may stay silent within an answer (``GPUSCHED_SESSION_READ_TIMEOUT``)."""
    return float(getattr(settings, "GPUSCHED_SESSION_READ_TIMEOUT", 60.0))


def max_body() -> int:
    """Largest request body forwarded, bytes (``GPUSCHED_SESSION_MAX_BODY``; a notebook upload is chunked)."""
    return int(getattr(settings, "GPUSCHED_SESSION_MAX_BODY", 64 * 2**20))


def client_timeout() -> aiohttp.ClientTimeout:
    return aiohttp.ClientTimeout(total=None, connect=connect_timeout(), sock_connect=connect_timeout(),
                                 sock_read=read_timeout())


def request_headers(headers: Iterable[tuple[bytes, bytes]], secret: str, *, websocket: bool = False) -> list[tuple[str, str]]:
    """The headers sent to the session's server for the browser's ASGI ``headers``."""
    out = []
    for raw_name, raw_value in headers:
        name = raw_name.decode("latin-1").lower()
        if name in _NOT_FORWARDED or (websocket and name.startswith("sec-websocket-")):
            continue
        out.append((name, raw_value.decode("latin-1")))
    out.append(("authorization", f"token {secret}"))
    if not websocket:
        out.append(("accept-encoding", "identity"))
    return out


def response_headers(headers: Iterable[tuple[str, str]], secret: str, origin: str) -> list[tuple[bytes, bytes]]:
    """The headers returned to the browser for the session server's response ``headers``."""
    out = []
    for name, value in headers:
        lower = name.lower()
        if lower in _NOT_RETURNED or secret in value:
            continue
        if lower == "location" and value.startswith(origin):
            value = value[len(origin):] or "/"  # the server's own address never reaches the browser
        out.append((lower.encode("latin-1"), value.encode("latin-1", "replace")))
    return out


class Scrubber:
    """Masks ``secret`` (``*`` of the same length) in a stream of chunks, also when split across two of them."""

    def __init__(self, secret: str) -> None:
        self.secret = secret.encode()
        self.mask = b"*" * len(self.secret)  # same length: the offsets in a binary frame stay right
        self.keep = len(self.secret) - 1
        self.tail = b""

    def feed(self, chunk: bytes) -> bytes:
        """What can be sent of ``chunk`` now (the last ``len(secret) - 1`` bytes wait for the next one)."""
        data = (self.tail + chunk).replace(self.secret, self.mask)
        if len(data) <= self.keep:
            self.tail = data
            return b""
        self.tail = data[len(data) - self.keep:]
        return data[:len(data) - self.keep]

    def finish(self) -> bytes:
        out, self.tail = self.tail, b""
        return out

    def text(self, value: str) -> str:
        """One whole message (a websocket text frame) without the secret."""
        return value.replace(self.secret.decode(), self.mask.decode())

    def frame(self, value: bytes) -> bytes:
        """One whole binary message; same length, so the offsets of a framed protocol stay right."""
        return value.replace(self.secret, self.mask)
