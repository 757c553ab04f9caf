"""The HTTP proxy to sessions: only the owner gets through, the secret is added and never returned,
path tricks are refused, and a slow or silent server costs a 504, not a hung worker."""

from __future__ import annotations

import json

import pytest
from asgiref.sync import async_to_sync
from channels.testing import HttpCommunicator
from django.contrib.auth.models import AnonymousUser

from audit.models import Action, AuditEntry
from portal.session_proxy import SessionProxy
from scheduler.models import JobState
from tests.support.session_server import SECRET

pytestmark = pytest.mark.django_db(transaction=True)

TIMEOUT = 10


def fetch(path: str, user, method: str = "GET", body: bytes = b"", headers=None, raw_path: bytes | None = None):  # noqa: ANN001, ANN201
    """(status, headers, body) of ``path`` through the proxy as ``user`` (None: anonymous)."""

    async def go():  # noqa: ANN202
        comm = HttpCommunicator(SessionProxy(), method, path, body=body,
                                headers=[(b"host", b"portal.test"), *(headers or [])])
        comm.scope["user"] = user if user is not None else AnonymousUser()
        comm.scope["client"] = ("10.0.0.9", 5555)
        if raw_path is not None:
            comm.scope["raw_path"] = raw_path
        response = await comm.get_response(TIMEOUT)
        return response["status"], dict(response["headers"]), response["body"]

    return async_to_sync(go)()


def test_owner_reaches_the_server_with_the_secret_added_and_nothing_of_the_portal(roles, session_server, make_session):
    job = make_session(roles.owner, session_server.port)
    status, headers, body = fetch(f"/sessions/{job.pk}/api/contents?type=file", roles.owner,
                                  headers=[(b"cookie", b"sessionid=portal-session"), (b"authorization", b"Bearer x")])
    assert status == 200
    seen = session_server.requests[-1]
    assert seen["path"] == f"/sessions/{job.pk}/api/contents" and seen["query"] == "type=file"
    assert seen["headers"]["Authorization"] == f"token {SECRET}"
    assert "Cookie" not in seen["headers"]
    assert SECRET.encode() not in body and b"*" * len(SECRET) in body
    assert b"set-cookie" not in headers and headers[b"x-session"] == b"yes"


@pytest.mark.parametrize("who", ["anonymous", "other", "staff"])
def test_everyone_but_the_owner_gets_no_byte_of_the_session(who, roles, session_server, make_session):
    job = make_session(roles.owner, session_server.port)
    user = None if who == "anonymous" else getattr(roles, who)
    status, headers, body = fetch(f"/sessions/{job.pk}/lab", user)
    assert status == (302 if who == "anonymous" else 404)
    assert session_server.requests == []
    assert b"session" not in body.replace(b"no such session", b"") and SECRET.encode() not in body
    if who == "anonymous":
        assert headers[b"location"].startswith(b"/accounts/login/")


def test_staff_gets_through_when_the_setting_allows_and_it_is_audited_once(roles, session_server, make_session, settings):
    settings.GPUSCHED_SESSION_STAFF_ACCESS = True
    job = make_session(roles.owner, session_server.port)
    assert fetch(f"/sessions/{job.pk}/lab", roles.staff)[0] == 200
    assert fetch(f"/sessions/{job.pk}/api/status", roles.staff)[0] == 200
    entries = AuditEntry.objects.filter(action=Action.SESSION_OPENED_BY_STAFF)
    assert [(e.actor_id, e.ip) for e in entries] == [(roles.staff.pk, "10.0.0.9")]
    assert fetch(f"/sessions/{job.pk}/lab", roles.other)[0] == 404  # the setting is for staff only


@pytest.mark.parametrize("state", [JobState.PENDING, JobState.CANCELLING, JobState.CANCELLED, JobState.COMPLETED,
                                   JobState.TIMEOUT, JobState.PREEMPTING])
def test_a_session_that_is_not_running_answers_404(state, roles, session_server, make_session):
    job = make_session(roles.owner, session_server.port, state=state)
    assert fetch(f"/sessions/{job.pk}/lab", roles.owner)[0] == 404
    assert session_server.requests == []


def test_forged_ids_and_batch_jobs_answer_404(roles, session_server, make_session, make_job):
    make_session(roles.owner, session_server.port)
    batch = make_job(roles.owner, state=JobState.RUNNING)
    for path in (f"/sessions/{batch.pk}/lab", "/sessions/999999/lab", "/sessions/99999999999999999/lab"):
        assert fetch(path, roles.owner)[0] == 404
    assert fetch("/sessions/0/lab", roles.owner)[0] == 400
    assert session_server.requests == []


def test_an_endpoint_of_an_earlier_attempt_is_not_used(roles, session_server, make_session):
    from scheduler.models import Job

    job = make_session(roles.owner, session_server.port)
    Job.objects.filter(pk=job.pk).update(attempt_count=2)  # requeued and restarted: a new server, not yet reported
    assert fetch(f"/sessions/{job.pk}/lab", roles.owner)[0] == 404


@pytest.mark.parametrize("raw", [
    b"/sessions/{id}/../../admin/", b"/sessions/{id}/lab/%2e%2e/%2E%2E/x", b"/sessions/{id}/a%2fb",
    b"/sessions/{id}/a%2Fb", b"/sessions/{id}/a%5cb", b"/sessions/{id}/a\\b", b"/sessions/{id}/./lab",
    b"/sessions/{id}/a%00b", b"/sessions/{id}/a%0d%0aX-Injected:%201",
])
def test_path_tricks_are_refused_before_anything_is_forwarded(raw, roles, session_server, make_session):
    job = make_session(roles.owner, session_server.port)
    raw_path = raw.replace(b"{id}", str(job.pk).encode())
    status, _, body = fetch(raw_path.decode("latin-1"), roles.owner, raw_path=raw_path)
    assert status == 400, body
    assert session_server.requests == []


def test_an_absolute_url_in_the_request_cannot_change_the_destination(roles, session_server, make_session):
    job = make_session(roles.owner, session_server.port)
    raw_path = f"/sessions/{job.pk}//evil.example:80/x".encode()
    status, _, _ = fetch(raw_path.decode(), roles.owner, raw_path=raw_path, headers=[(b"x-forwarded-host", b"evil")])
    assert status == 200
    assert session_server.requests[-1]["path"] == f"/sessions/{job.pk}//evil.example:80/x"
    assert "X-Forwarded-Host" not in session_server.requests[-1]["headers"]


def test_every_method_is_forwarded_with_its_body(roles, session_server, make_session):
    job = make_session(roles.owner, session_server.port)
    for method in ("POST", "PUT", "PATCH", "DELETE"):
        status, _, body = fetch(f"/sessions/{job.pk}/api/contents/x.ipynb", roles.owner, method=method,
                                body=b'{"a": 1}', headers=[(b"origin", b"http://portal.test")])
        assert status == 200
        assert json.loads(body)["method"] == method and json.loads(body)["body"] == '{"a": 1}'


def test_a_cross_origin_write_is_refused(roles, session_server, make_session):
    job = make_session(roles.owner, session_server.port)
    status, _, _ = fetch(f"/sessions/{job.pk}/api/kernels", roles.owner, method="POST",
                         headers=[(b"origin", b"http://evil.example")])
    assert status == 403
    assert session_server.requests == []


def test_a_server_that_never_answers_gets_a_504(roles, silent_port, make_session, settings):
    settings.GPUSCHED_SESSION_READ_TIMEOUT = 0.5
    job = make_session(roles.owner, silent_port)
    status, _, body = fetch(f"/sessions/{job.pk}/lab", roles.owner)
    assert status == 504 and b"did not answer" in body


def test_a_server_that_answers_too_slowly_gets_a_504(roles, session_server, make_session, settings):
    settings.GPUSCHED_SESSION_READ_TIMEOUT = 0.5
    job = make_session(roles.owner, session_server.port)
    assert fetch(f"/sessions/{job.pk}/slow", roles.owner)[0] == 504
    assert fetch(f"/sessions/{job.pk}/lab", roles.owner)[0] == 200  # the next request is served as usual


def test_a_server_that_is_gone_gets_a_502(roles, make_session):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    job = make_session(roles.owner, port)
    assert fetch(f"/sessions/{job.pk}/lab", roles.owner)[0] == 502


def test_a_silent_server_holds_no_worker_the_portal_answers_meanwhile(roles, session_server, silent_port, make_session,
                                                                       settings):
    import asyncio

    settings.GPUSCHED_SESSION_READ_TIMEOUT = 5
    silent = make_session(roles.owner, silent_port)
    live = make_session(roles.other, session_server.port)

    async def go() -> tuple[bool, int, int]:
        async def get(job, user):  # noqa: ANN001, ANN202
            comm = HttpCommunicator(SessionProxy(), "GET", f"/sessions/{job.pk}/lab", headers=[(b"host", b"portal.test")])
            comm.scope["user"] = user
            return (await comm.get_response(TIMEOUT))["status"]

        waiting = asyncio.ensure_future(get(silent, roles.owner))
        await asyncio.sleep(0.2)
        answered = await get(live, roles.other)
        still_waiting = not waiting.done()
        return still_waiting, answered, await waiting

    still_waiting, answered, timed_out = async_to_sync(go)()
    assert (still_waiting, answered, timed_out) == (True, 200, 504)
