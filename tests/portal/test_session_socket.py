"""The websocket proxy to sessions: the owner's frames are relayed (secret masked), everyone else and
every session that is not running is refused before the handshake is accepted."""

from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import AnonymousUser

from portal.routing import websocket_urlpatterns
from scheduler.models import JobState
from tests.support.session_server import SECRET

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("memory_layer")]

TIMEOUT = 10


def communicator(path: str, user, subprotocols=None) -> WebsocketCommunicator:  # noqa: ANN001
    from channels.routing import URLRouter

    comm = WebsocketCommunicator(URLRouter(websocket_urlpatterns), path, subprotocols=subprotocols)
    comm.scope["user"] = user if user is not None else AnonymousUser()
    return comm


def test_owner_talks_to_the_server_through_the_proxy_and_never_sees_the_secret(roles, session_server, make_session):
    job = make_session(roles.owner, session_server.port)

    async def go() -> None:
        comm = communicator(f"/sessions/{job.pk}/api/kernels/k1/channels?session_id=abc", roles.owner,
                            subprotocols=["v1.kernel.websocket.jupyter.org"])
        connected, subprotocol = await comm.connect(TIMEOUT)
        assert connected and subprotocol == "v1.kernel.websocket.jupyter.org"
        assert await comm.receive_from(TIMEOUT) == "hello " + "*" * len(SECRET)
        await comm.send_to(text_data="ping")
        assert await comm.receive_from(TIMEOUT) == "echo ping"
        await comm.send_to(bytes_data=b"\x00\x01")
        assert await comm.receive_from(TIMEOUT) == b"echo \x00\x01"
        await comm.disconnect()

    async_to_sync(go)()
    seen = session_server.requests[-1]
    assert seen["path"] == f"/sessions/{job.pk}/api/kernels/k1/channels" and seen["query"] == "session_id=abc"
    assert seen["headers"]["Authorization"] == f"token {SECRET}"


@pytest.mark.parametrize("who", ["anonymous", "other", "staff"])
def test_everyone_but_the_owner_is_refused_before_the_handshake(who, roles, session_server, make_session):
    job = make_session(roles.owner, session_server.port)
    user = None if who == "anonymous" else getattr(roles, who)

    async def go() -> bool:
        connected, _ = await communicator(f"/sessions/{job.pk}/pty", user).connect(TIMEOUT)
        return connected

    assert async_to_sync(go)() is False
    assert session_server.requests == []


def test_staff_may_connect_when_the_setting_allows(roles, session_server, make_session, settings):
    settings.GPUSCHED_SESSION_STAFF_ACCESS = True
    job = make_session(roles.owner, session_server.port)

    async def go() -> bool:
        comm = communicator(f"/sessions/{job.pk}/pty", roles.staff)
        connected, _ = await comm.connect(TIMEOUT)
        await comm.disconnect()
        return connected

    assert async_to_sync(go)() is True


@pytest.mark.parametrize("state", [JobState.PENDING, JobState.CANCELLING, JobState.COMPLETED])
def test_a_session_that_is_not_running_refuses_websockets(state, roles, session_server, make_session):
    job = make_session(roles.owner, session_server.port, state=state)

    async def go() -> bool:
        connected, _ = await communicator(f"/sessions/{job.pk}/pty", roles.owner).connect(TIMEOUT)
        return connected

    assert async_to_sync(go)() is False


def test_path_tricks_and_forged_ids_are_refused(roles, session_server, make_session):
    job = make_session(roles.owner, session_server.port)

    async def go(path: str, raw: bytes | None = None) -> bool:
        comm = communicator(path, roles.owner)
        if raw is not None:
            comm.scope["raw_path"] = raw
        connected, _ = await comm.connect(TIMEOUT)
        return connected

    assert async_to_sync(go)("/sessions/999999/pty") is False
    assert async_to_sync(go)(f"/sessions/{job.pk}/a", f"/sessions/{job.pk}/..%2f..%2fadmin".encode()) is False
    assert session_server.requests == []


def test_a_server_that_refuses_the_secret_closes_the_browser_side(roles, session_server, make_session):
    job = make_session(roles.owner, session_server.port, secret="w" * 43)

    async def go() -> bool:
        connected, _ = await communicator(f"/sessions/{job.pk}/pty", roles.owner).connect(TIMEOUT)
        return connected

    assert async_to_sync(go)() is False


def test_a_silent_server_does_not_hold_the_handshake_for_ever(roles, silent_port, make_session, settings):
    settings.GPUSCHED_SESSION_CONNECT_TIMEOUT = 0.5
    job = make_session(roles.owner, silent_port)

    async def go() -> bool:
        connected, _ = await communicator(f"/sessions/{job.pk}/pty", roles.owner).connect(TIMEOUT)
        return connected

    assert async_to_sync(go)() is False


def test_revoking_the_owners_access_closes_an_open_session_socket(roles, session_server, make_session, memory_layer):
    from portal import realtime

    job = make_session(roles.owner, session_server.port)

    async def go() -> dict:
        comm = communicator(f"/sessions/{job.pk}/pty", roles.owner)
        connected, _ = await comm.connect(TIMEOUT)
        assert connected
        assert (await comm.receive_from(TIMEOUT)).startswith("hello ")
        await memory_layer.group_send(realtime.user_group(roles.owner.pk), {"type": realtime.ACCESS_REVOKED})
        return await comm.receive_output(TIMEOUT)

    assert async_to_sync(go)() == {"type": "websocket.close", "code": 1000}
