"""portal.asgi_handler: the portal's HTTP requests cross from the event loop into a worker thread
once, not once per middleware, and answer as Django's own ASGI handler does."""

from __future__ import annotations

import asyncio

import pytest
from asgiref.sync import SyncToAsync, async_to_sync
from asgiref.testing import ApplicationCommunicator


def _request(app, method: str, path: str, headers: list[tuple[bytes, bytes]] = (), body: bytes = b"") -> tuple[int, dict, bytes]:  # noqa: ANN001
    """One HTTP request through ``app``: (status, headers, body)."""
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method, "scheme": "http",
             "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
             "headers": [(b"host", b"testserver"), *headers], "client": ("127.0.0.1", 5000),
             "server": ("testserver", 80)}

    async def run() -> tuple[int, dict, bytes]:
        comm = ApplicationCommunicator(app, scope)
        await comm.send_input({"type": "http.request", "body": body, "more_body": False})
        start = await comm.receive_output(10)
        chunks = []
        while True:
            message = await comm.receive_output(10)
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        await comm.wait(10)
        return start["status"], {k.lower(): v for k, v in start["headers"]}, b"".join(chunks)

    return async_to_sync(run)()


@pytest.fixture
def thread_calls(monkeypatch):  # noqa: ANN001, ANN201
    """Counts the calls of ``sync_to_async`` wrappers (each a crossing into a worker thread and back)."""
    calls = {"n": 0}
    original = SyncToAsync.__call__

    async def counting(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        calls["n"] += 1
        return await original(self, *args, **kwargs)

    monkeypatch.setattr(SyncToAsync, "__call__", counting)
    return calls


@pytest.mark.django_db(transaction=True)
def test_a_request_crosses_into_a_worker_thread_once_for_its_middlewares_and_view(thread_calls) -> None:
    from django.core.handlers.asgi import ASGIHandler

    from portal.asgi_handler import OneCallASGIHandler

    counts = {}
    for handler in (ASGIHandler(), OneCallASGIHandler()):
        _request(handler, "GET", "/api/v1/jobs/", [(b"authorization", b"Token no-such-token")])  # warm up
        thread_calls["n"] = 0
        status, _, _ = _request(handler, "GET", "/api/v1/jobs/", [(b"authorization", b"Token no-such-token")])
        assert status == 401
        counts[type(handler).__name__] = thread_calls["n"]
    # Django's handler also crosses for each synchronous receiver of the request signals; the
    # middlewares and the view were a dozen more crossings, and are one now.
    print(counts)
    signals_only = counts["OneCallASGIHandler"] - 1
    assert counts["ASGIHandler"] - signals_only >= 8, counts
    assert not asyncio.iscoroutinefunction(OneCallASGIHandler()._middleware_chain)


@pytest.mark.django_db(transaction=True)
def test_the_portal_answers_through_it_as_through_django_s_handler(django_user_model) -> None:
    from portal.asgi import application, django_asgi_app
    from portal.asgi_handler import OneCallASGIHandler

    assert isinstance(django_asgi_app, OneCallASGIHandler)
    status, headers, body = _request(application, "GET", "/accounts/login/")
    assert status == 200 and b"csrfmiddlewaretoken" in body
    assert headers[b"x-content-type-options"] == b"nosniff"  # the middlewares ran
    status, _, body = _request(application, "POST", "/api/v1/jobs/",
                               [(b"content-type", b"application/json"), (b"content-length", b"99999999")], b"{}")
    assert status == 413 and b"limit" in body  # the body limit still answers before any parsing
    status, _, _ = _request(application, "GET", "/no/such/page/")
    assert status == 404
