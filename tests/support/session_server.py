"""A stand-in for a session's server (JupyterLab, the terminal) in a thread: what the proxy forwards.

``FakeSessionServer`` answers under any path, in its own event loop and
thread, with what it received (method, path, query, headers, body) as JSON,
plus the secret in its body and a cookie, so tests can check what the proxy
strips. It refuses anything without ``Authorization: token <secret>`` (403),
as the real servers do. ``/slow`` never answers; ``ws`` paths are websockets
that echo and also send the secret. ``silent_port()`` is a TCP port that
accepts connections and never answers anything.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections.abc import Iterator

import pytest
from aiohttp import WSMsgType, web

SECRET = "s3cr3t-" + "x" * 40


class FakeSessionServer:
    def __init__(self, secret: str = SECRET) -> None:
        self.secret = secret
        self.loop = asyncio.new_event_loop()
        self.port = 0
        self.requests: list[dict] = []
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> "FakeSessionServer":
        self._thread.start()
        assert self._ready.wait(10), "fake session server did not start"
        return self

    def stop(self) -> None:
        async def cancel_handlers() -> None:  # the never-answering ones are still waiting
            for task in asyncio.all_tasks():
                if task is not asyncio.current_task():
                    task.cancel()

        asyncio.run_coroutine_threadsafe(cancel_handlers(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self.handle)
        runner = web.AppRunner(app)
        self.loop.run_until_complete(runner.setup())
        site = web.TCPSite(runner, "127.0.0.1", 0)
        self.loop.run_until_complete(site.start())
        self.port = site._server.sockets[0].getsockname()[1]
        self._ready.set()
        self.loop.run_forever()
        self.loop.run_until_complete(runner.cleanup())

    async def handle(self, request: web.Request) -> web.StreamResponse:
        seen = {"method": request.method, "path": request.raw_path.split("?")[0], "query": request.query_string,
                "headers": dict(request.headers), "body": (await request.read()).decode("latin-1")}
        self.requests.append(seen)
        if request.headers.get("Authorization") != f"token {self.secret}":
            return web.Response(status=403, text="forbidden")
        if request.path.endswith("/slow"):
            await asyncio.sleep(3600)
        if request.headers.get("Upgrade", "").lower() == "websocket":
            return await self.websocket(request)
        body = json.dumps({**seen, "page_config": {"token": self.secret}})
        return web.Response(text=body, content_type="application/json",
                            headers={"Set-Cookie": "username-x=abc; Path=/", "X-Session": "yes"})

    async def websocket(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(protocols=("v1.kernel.websocket.jupyter.org",))
        await ws.prepare(request)
        await ws.send_str(f"hello {self.secret}")
        async for msg in ws:
            if msg.type == WSMsgType.TEXT:
                await ws.send_str(f"echo {msg.data}")
            elif msg.type == WSMsgType.BINARY:
                await ws.send_bytes(b"echo " + msg.data)
        return ws


@pytest.fixture
def session_server() -> Iterator[FakeSessionServer]:
    server = FakeSessionServer().start()
    yield server
    server.stop()


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts TCP connections (the kernel's backlog) and never sends a byte."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(16)
        yield s.getsockname()[1]
