"""The portal's HTTP proxy to interactive sessions: ``/sessions/<job id>/...`` (ASGI, every method).

For each request: the path is checked (``portal.session_paths``), the viewer
must be the session's owner (or staff where allowed, audited;
``portal.session_access``), an unsafe method must come from the portal's own
origin (the proxy is outside Django's CSRF middleware), and only then is the
request forwarded, with the session's secret, to the address its node
reported. An anonymous viewer is sent to the login page; anyone else who may
not see the session, and every session that is not running, get 404, with
no byte from the session's server. A server that does not connect within
``GPUSCHED_SESSION_CONNECT_TIMEOUT`` or goes silent for
``GPUSCHED_SESSION_READ_TIMEOUT`` gets the browser a 504: the wait is a
timer in the event loop, so no worker is held.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any
from urllib.parse import quote, urlsplit

import aiohttp
from channels.db import database_sync_to_async
from django.conf import settings
from django.shortcuts import resolve_url
from yarl import URL

from portal import session_access, session_paths, session_upstream as upstream

log = logging.getLogger(__name__)

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


async def respond(send: Any, status: int, text: str, headers: list[tuple[bytes, bytes]] | None = None) -> None:
    """A small plain-text answer from the portal itself."""
    body = (text + "\n").encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(body)).encode()),
                            (b"cache-control", b"no-store"), *(headers or [])]})
    await send({"type": "http.response.body", "body": body})


def same_origin(scope: dict[str, Any]) -> bool:
    """Whether a request's ``Origin`` (or, without one, ``Sec-Fetch-Site``) says it comes from the portal's pages."""
    headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
    origin = headers.get("origin")
    if origin is not None:
        return urlsplit(origin).netloc.lower() == headers.get("host", "").lower()
    return headers.get("sec-fetch-site", "same-origin") in ("same-origin", "none")


async def read_body(receive: Any, limit: int) -> bytes | None:
    """The whole request body, or None past ``limit`` bytes."""
    chunks, size, more = [], 0, True
    while more:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
        more = message.get("more_body", False)
    return b"".join(chunks)


def client_address(scope: dict[str, Any]) -> str | None:
    client = scope.get("client")
    return client[0] if client else None


class SessionProxy:
    """ASGI application for the HTTP requests of session URLs (``session_paths.is_proxied``)."""

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        try:
            where = session_paths.parse(scope)
        except session_paths.BadSessionPath as exc:
            return await respond(send, 400, str(exc))
        user = scope.get("user")
        if user is None or not user.is_authenticated:
            login = f"{resolve_url(settings.LOGIN_URL)}?next={quote(scope['path'])}"
            return await respond(send, 302, "log in first", [(b"location", login.encode("latin-1"))])
        target = await database_sync_to_async(session_access.open_target)(user, where.job_id, client_address(scope))
        if target is None:
            return await respond(send, 404, "no such session")
        if scope["method"] not in SAFE_METHODS and not same_origin(scope):
            return await respond(send, 403, "cross-origin request refused")
        body = await read_body(receive, upstream.max_body())
        if body is None:
            return await respond(send, 413, "request body too large")
        url = URL(f"{target.origin}{where.raw_path}" + (f"?{where.query}" if where.query else ""), encoded=True)
        await self.forward(scope, send, url, body, target)

    async def forward(self, scope: dict[str, Any], send: Any, url: URL, body: bytes, target: Any) -> None:
        """Send the request to the session's server and stream its answer back, secret masked."""
        headers = upstream.request_headers(scope.get("headers", []), target.secret)
        started = False
        try:
            async with aiohttp.ClientSession(timeout=upstream.client_timeout(), cookie_jar=aiohttp.DummyCookieJar()) as http:
                async with http.request(scope["method"], url, headers=headers, data=body or None,
                                        allow_redirects=False) as resp:
                    await send({"type": "http.response.start", "status": resp.status,
                                "headers": upstream.response_headers(resp.headers.items(), target.secret, target.origin)})
                    started = True
                    scrubber = upstream.Scrubber(target.secret)
                    async for chunk in resp.content.iter_any():
                        out = scrubber.feed(chunk)
                        if out:
                            await send({"type": "http.response.body", "body": out, "more_body": True})
                    await send({"type": "http.response.body", "body": scrubber.finish()})
        except (asyncio.TimeoutError, aiohttp.ClientError, OSError) as exc:
            timed_out = isinstance(exc, (asyncio.TimeoutError, aiohttp.ServerTimeoutError))
            log.warning("session of job %s: %s %s: %s", target.job_id, scope["method"], url.path,
                        "timed out" if timed_out else type(exc).__name__)
            if not started:
                await respond(send, 504 if timed_out else 502,
                              "the session's server did not answer in time" if timed_out
                              else "the session's server cannot be reached")
            else:  # the answer has begun: end it (the browser sees a truncated response)
                await send({"type": "http.response.body", "body": b""})
