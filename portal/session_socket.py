"""The portal's websocket proxy to interactive sessions (JupyterLab's kernels, the terminal's pty).

The browser's handshake is answered only after the checks of the HTTP proxy
(path, owner or audited staff, a running session) and after the session's
server accepted the same handshake with the secret added: a refusal closes
the connection before it is accepted (the browser sees 403) and says nothing
about the session. Then frames are relayed both ways until either side
closes, or until the viewer's access is revoked (the live pages' hint,
``portal.realtime.publish_access_revoked``); frames from the server have the secret masked. Activity is noted at
most once per ``interactive.services.ACTIVITY_RESOLUTION_S``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import aiohttp
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from django.utils import timezone
from yarl import URL

from interactive import services
from interactive.selectors import Target
from portal import realtime, session_access, session_paths, session_upstream as upstream
from portal.session_proxy import client_address

log = logging.getLogger(__name__)

MAX_MESSAGE = 64 * 2**20  # bytes of one frame (a notebook's outputs can be large)


class SessionSocketProxy:
    """ASGI application for websockets under ``/sessions/<job id>/`` (routed by ``portal.routing``)."""

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if (await receive())["type"] != "websocket.connect":
            return
        target, where = await self.check(scope)
        if target is None:
            return await send({"type": "websocket.close", "code": 4403})
        url = URL(f"ws{target.origin[4:]}{where.raw_path}" + (f"?{where.query}" if where.query else ""), encoded=True)
        headers = upstream.request_headers(scope.get("headers", []), target.secret, websocket=True)
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None, sock_connect=upstream.connect_timeout()),
                                         cookie_jar=aiohttp.DummyCookieJar()) as http:
            try:
                # The whole handshake, not just the TCP connection: a server may accept and then say nothing.
                ws = await asyncio.wait_for(
                    http.ws_connect(url, headers=headers, protocols=scope.get("subprotocols") or (),
                                    max_msg_size=MAX_MESSAGE, autoping=True,
                                    timeout=aiohttp.ClientWSTimeout(ws_receive=None, ws_close=upstream.connect_timeout())),
                    upstream.connect_timeout())
            except (asyncio.TimeoutError, aiohttp.ClientError, OSError) as exc:
                log.warning("session of job %s: websocket %s refused upstream: %s", target.job_id, url.path,
                            type(exc).__name__)
                return await send({"type": "websocket.close", "code": 4502})
            await send({"type": "websocket.accept", "subprotocol": ws.protocol})
            await self.relay(ws, receive, send, target, scope["user"].pk)

    async def check(self, scope: dict[str, Any]) -> tuple[Target | None, Any]:
        try:
            where = session_paths.parse(scope)
        except session_paths.BadSessionPath:
            return None, None
        user = scope.get("user")
        if user is None or not user.is_authenticated:
            return None, None
        return await database_sync_to_async(session_access.open_target)(user, where.job_id, client_address(scope)), where

    async def relay(self, ws: aiohttp.ClientWebSocketResponse, receive: Any, send: Any, target: Target,
                    user_id: int) -> None:
        """Frames both ways until one side closes, or the viewer's access is revoked; then both are closed."""
        scrubber = upstream.Scrubber(target.secret)
        layer = get_channel_layer()
        channel = await layer.new_channel() if layer is not None else None
        if channel is not None:  # the live pages' revocation hint (portal.access.revoke_access) reaches us too
            await layer.group_add(realtime.user_group(user_id), channel)

        async def revoked() -> None:
            if channel is None:
                await asyncio.Event().wait()  # no channel layer: no revocation hints, wait for ever
            while (await layer.receive(channel)).get("type") != realtime.ACCESS_REVOKED:
                pass
        noted = time.monotonic()

        async def from_browser() -> None:
            nonlocal noted
            while True:
                message = await receive()
                if message["type"] != "websocket.receive":
                    return
                if message.get("bytes") is not None:
                    await ws.send_bytes(message["bytes"])
                else:
                    await ws.send_str(message.get("text") or "")
                if time.monotonic() - noted > services.ACTIVITY_RESOLUTION_S:
                    noted = time.monotonic()
                    await database_sync_to_async(services.touch)(target.job_id, timezone.now())

        async def from_server() -> None:
            async for msg in ws:
                if msg.type == aiohttp.WSMsgType.TEXT:
                    await send({"type": "websocket.send", "text": scrubber.text(msg.data)})
                elif msg.type == aiohttp.WSMsgType.BINARY:
                    await send({"type": "websocket.send", "bytes": scrubber.frame(msg.data)})
                else:
                    return

        tasks = [asyncio.ensure_future(f()) for f in (from_browser, from_server, revoked)]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            if channel is not None:
                await layer.group_discard(realtime.user_group(user_id), channel)
            await ws.close()
            try:
                await send({"type": "websocket.close", "code": 1000})
            except Exception:  # noqa: BLE001 - the browser has gone already
                pass
