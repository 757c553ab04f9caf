"""Access control under attack: the permission matrix with an agent credential, the dashboard,
/metrics and the WebSocket groups; per-node agent tokens; the login rate limit; revoking
sessions and tokens.

The portal's own matrix (tests/portal/test_permissions.py) is extended here,
not copied: its rows are imported and every row gets a fifth role, a node agent's
credential presented as an API token, which must open nothing a stranger cannot open.
"""

from __future__ import annotations

import contextlib

import pytest
from asgiref.sync import async_to_sync
from django.core.management import CommandError, call_command
from django.utils import timezone

from cluster import protocol, message_signing, tasks as report_tasks
from cluster.auth import node_token
from cluster.models import Gpu, Node
from portal.dashboard.models import RunState, SimulationRun
from portal.models import ApiToken
from scheduler.models import Attempt, AttemptState, Job, JobState
from tests.portal.test_permissions import BODIES, MATRIX, ROLES

pytestmark = pytest.mark.django_db

SECRET = "adversarial-agent-secret"
METRICS_TOKEN = "metrics-bearer-token"

# Rows the portal matrix does not have: the dashboard pages, a simulation run of the owner, /metrics.
# (kind, method, path, {role: status})
DASHBOARD = [
    ("page", "get", "/cluster/", {"anonymous": 302, "owner": 200, "other": 200, "staff": 200}),
    ("page", "get", "/latency/", {"anonymous": 302, "owner": 200, "other": 200, "staff": 200}),
    ("page", "get", "/simulations/", {"anonymous": 302, "owner": 200, "other": 200, "staff": 200}),
    ("page", "get", "/simulations/{run}/", {"anonymous": 302, "owner": 200, "other": 404, "staff": 200}),
    ("page", "get", "/simulations/{run}/status/", {"anonymous": 302, "owner": 200, "other": 404, "staff": 200}),
    ("page", "get", "/simulations/{run}/results.json", {"anonymous": 302, "owner": 200, "other": 404, "staff": 200}),
    ("page", "get", "/simulations/{run}/report.html", {"anonymous": 302, "owner": 200, "other": 404, "staff": 200}),
    ("metrics", "get", "/metrics", {"anonymous": 401, "owner": 401, "other": 401, "staff": 200}),
]
ALL_ROLES = [*ROLES, "agent"]


def _agent_expectation(kind: str, expected: dict[str, int]) -> int:
    """An agent's credential is a stranger's: pages send it to the login page; the API refuses the
    key as a token (401) on every endpoint, the public schema and docs included; /metrics wants its own."""
    if kind == "api":
        return 401
    return expected["anonymous"]


CASES = [
    (kind, method, path, role, expected[role] if role != "agent" else _agent_expectation(kind, expected))
    for kind, method, path, expected in [*MATRIX, *DASHBOARD]
    for role in ALL_ROLES
    if role == "agent" or (kind, method, path, expected) in DASHBOARD
]


@pytest.fixture
def secured(settings):  # noqa: ANN001
    settings.AGENT_SECRET = SECRET
    settings.METRICS_TOKEN = METRICS_TOKEN
    settings.METRICS_ALLOWED_IPS = []
    return settings


def _succeeded_run(owner) -> SimulationRun:  # noqa: ANN001
    return SimulationRun.objects.create(
        owner=owner, state=RunState.SUCCEEDED, workload_kind="synthetic", params={"policies": ["fifo"]},
        results=[{"policy": "fifo", "jobs": 0}], table="policy\nfifo", finished_at=timezone.now(),
    )


@pytest.mark.parametrize("kind, method, path, role, expected", CASES,
                         ids=[f"{m.upper()} {p} as {r}" for _, m, p, r, _ in CASES])
def test_permission_matrix_with_agent_credential_dashboard_and_metrics(
    secured, roles, make_job, api_as, browser_as, kind, method, path, role, expected
) -> None:
    from django.test import Client
    from rest_framework.test import APIClient

    job = make_job(roles.owner)
    token, _ = ApiToken.issue(roles.owner, "owner's")
    run = _succeeded_run(roles.owner)
    url = path.format(job=job.pk, token=token.pk, run=run.pk)
    body = BODIES.get(path)
    if body and "user" in body:
        body = {**body, "user": str(roles.other.pk)}
    before = (Job.objects.count(), ApiToken.objects.filter(revoked__isnull=True).count())
    if role == "agent":
        key = node_token(SECRET, "n1")
        header = f"Bearer {key}" if kind == "metrics" else f"Token {key}"
        client = APIClient(HTTP_AUTHORIZATION=header) if kind == "api" else Client(HTTP_AUTHORIZATION=header)
        response = getattr(client, method)(url, body or {}, **({"format": "json"} if kind == "api" else {}))
        assert (Job.objects.count(), ApiToken.objects.filter(revoked__isnull=True).count()) == before
        assert Job.objects.get(pk=job.pk).state == JobState.PENDING
    else:
        user = None if role == "anonymous" else getattr(roles, role)
        response = getattr(browser_as(user), method)(url)
    assert response.status_code == expected, (response.status_code, response.content[:300])


def test_metrics_open_only_to_the_metrics_token(secured, client) -> None:
    assert client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {METRICS_TOKEN}").status_code == 200
    assert client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {node_token(SECRET, 'n1')}").status_code == 401


# --- WebSocket groups -----------------------------------------------------------------------

WS_ROUTES = {
    "/ws/cluster/": {"anonymous": 4401, "owner": "cluster", "other": "cluster", "staff": "cluster", "agent": 4401},
    "/ws/cluster/?changes=1": {"anonymous": 4401, "owner": "cluster", "other": "cluster", "staff": "cluster",
                               "agent": 4401},
    "/ws/latency/": {"anonymous": 4401, "owner": "latency", "other": "latency", "staff": "latency", "agent": 4401},
    "/ws/jobs/{job}/": {"anonymous": 4401, "owner": "job", "other": 4404, "staff": "job", "agent": 4401},
}
WS_CASES = [(path, role, expected[role]) for path, expected in WS_ROUTES.items() for role in ALL_ROLES]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("path, role, expected", WS_CASES, ids=[f"{p} as {r}" for p, r, _ in WS_CASES])
def test_websocket_matrix_through_the_asgi_application(secured, roles, make_job, memory_layer, path, role,
                                                       expected) -> None:
    """Through portal.asgi with real cookies: a session joins its groups; an agent's token header
    (no session) and a stranger are closed 4401; someone else's job closes like a 404."""
    from channels.testing import WebsocketCommunicator
    from django.conf import settings
    from django.test import Client

    from portal.asgi import application

    job = make_job(roles.owner)
    headers = [(b"origin", b"http://localhost"), (b"host", b"localhost")]
    if role == "agent":
        headers.append((b"authorization", f"Token {node_token(SECRET, 'n1')}".encode()))
    elif role != "anonymous":
        client = Client()
        client.force_login(getattr(roles, role))
        cookie = f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"
        headers.append((b"cookie", cookie.encode()))

    async def scenario() -> object:
        communicator = WebsocketCommunicator(application, path.format(job=job.pk), headers=headers)
        connected, _ = await communicator.connect(5)
        assert connected
        output = await communicator.receive_output(5)
        await communicator.disconnect()
        return output

    output = async_to_sync(scenario)()
    if isinstance(expected, int):
        assert output == {"type": "websocket.close", "code": expected}
    else:
        import json

        assert output["type"] == "websocket.send" and json.loads(output["text"])["type"] == expected


# --- Agents: per-node tokens ---------------------------------------------------------------


def _register(node: str, token: str) -> None:
    report_tasks.register(node=node, gpus=2, cpus=8.0, mem_gb=32.0, gpu_models=["Virtual GPU"] * 2,
                          agent_version="test", token=token)


def _running_job_on(node: str, owner) -> Job:  # noqa: ANN001
    now = timezone.now()
    job = Job.objects.create(owner=owner, name="victim", command="sleep 100", num_gpus=1, state=JobState.RUNNING,
                             attempt_count=1, started_at=now, first_started_at=now)
    Attempt.objects.create(job=job, number=1, gpu_allocation={node: [0]}, state=AttemptState.RUNNING, started_at=now)
    Gpu.objects.filter(node__name=node, index=0).update(allocated_to=job)
    return job


def test_per_node_tokens_authenticate_each_agent_and_no_other(secured, roles, sent, no_triggers, caplog) -> None:
    _register("n1", node_token(SECRET, "n1"))
    _register("n2", node_token(SECRET, "n2"))
    assert set(Node.objects.values_list("name", flat=True)) == {"n1", "n2"}

    # n1's agent claims to be n3, or uses the old shared token, or none: refused, nothing written.
    for token in (node_token(SECRET, "n1"), "", "shared-token", node_token("another-secret", "n3")):
        secured.AGENT_TOKEN = "shared-token"
        _register("n3", token)
    assert not Node.objects.filter(name="n3").exists()
    refusals = [r for r in caplog.records if r.name.startswith("cluster.") and "wrong or missing agent token" in r.getMessage()]
    assert len(refusals) == 4  # logged once each by the report path (the audit log records them too)


def test_a_signed_report_passes_only_for_the_node_and_report_it_was_signed_for(secured, roles, sent, no_triggers,
                                                                               caplog) -> None:  # noqa: ANN001
    """Agents sign their reports instead of sending their tokens (cluster/message_signing.py): what a reader of
    the broker sees lets it report for no node, and n1's token signs for n1 alone."""
    n1, n2 = node_token(SECRET, "n1"), node_token(SECRET, "n2")
    fields = {"gpus": 2, "cpus": 8.0, "mem_gb": 32.0, "gpu_models": ["Virtual GPU"] * 2, "agent_version": "test"}
    reg = protocol.REPORT_REGISTER
    report_tasks.register(**message_signing.signed(n1, reg, {"node": "n1", **fields}, 1.0))
    assert set(Node.objects.values_list("name", flat=True)) == {"n1"}

    seen_on_the_broker = message_signing.signed(n2, reg, {"node": "n2", **fields}, 1.0)
    assert n2 not in repr(seen_on_the_broker)
    report_tasks.register(**message_signing.signed(n1, reg, {"node": "n2", **fields}, 1.0))  # n1's key, n2's name
    report_tasks.register(**{**seen_on_the_broker, "node": "n3"})  # n2's signed report, renamed
    report_tasks.register(**{**seen_on_the_broker, "gpus": 8})  # altered
    report_tasks.heartbeat(**{"node": "n2", "running": [], "signed_at": 1.0,
                              "signature": seen_on_the_broker["signature"]})  # moved to another report
    assert set(Node.objects.values_list("name", flat=True)) == {"n1"}
    refusals = [r for r in caplog.records if r.name.startswith("cluster.") and "signature does not verify" in r.getMessage()]
    assert len(refusals) == 4


def test_an_agent_cannot_report_for_another_nodes_job(secured, roles, sent, no_triggers) -> None:
    _register("n1", node_token(SECRET, "n1"))
    _register("n2", node_token(SECRET, "n2"))
    job = _running_job_on("n2", roles.owner)
    beat_before = Node.objects.get(name="n2").last_heartbeat
    n1 = node_token(SECRET, "n1")
    exit_kwargs = {"job_id": job.pk, "attempt": 1, "exit_code": 0, "signal": None, "ended_at": 1.0e9,
                   "notice_at": None, "checkpointed": False, "reason": None}

    report_tasks.exited(node="n2", token=n1, **exit_kwargs)  # pretends to be n2: wrong token
    report_tasks.exited(node="n1", token=n1, **exit_kwargs)  # as itself: the job does not run on n1
    report_tasks.started(node="n2", token=n1, job_id=job.pk, attempt=1, pid=1, started_at=1.0e9)
    report_tasks.heartbeat(node="n2", token=n1, running=[])
    report_tasks.log_lines(node="n2", token=n1, job_id=job.pk, attempt=1, lines=["forged"])
    report_tasks.log_lines(node="n1", token=n1, job_id=job.pk, attempt=1, lines=["forged as itself"])

    job.refresh_from_db()
    assert job.state == JobState.RUNNING
    assert Attempt.objects.get(job=job).state == AttemptState.RUNNING
    assert Gpu.objects.get(node__name="n2", index=0).allocated_to_id == job.pk
    assert Node.objects.get(name="n2").last_heartbeat == beat_before
    assert not Attempt.objects.get(job=job).log_chunks.exists()
    assert sent.of("agent.kill") == []  # nothing was told to stop either

    report_tasks.log_lines(node="n2", token=node_token(SECRET, "n2"), job_id=job.pk, attempt=1, lines=["real"])
    report_tasks.exited(node="n2", token=node_token(SECRET, "n2"), **exit_kwargs)  # the real n2 agent
    assert Job.objects.get(pk=job.pk).state == JobState.COMPLETED
    assert list(Attempt.objects.get(job=job).log_chunks.values_list("text", flat=True)) == ["real"]


def test_agent_token_command(secured, settings) -> None:
    from io import StringIO

    out = StringIO()
    call_command("agent_token", "gpu-01", stdout=out)
    assert out.getvalue().strip() == node_token(SECRET, "gpu-01")
    with pytest.raises(CommandError, match="node"):
        call_command("agent_token", "../etc")
    settings.AGENT_SECRET = ""
    with pytest.raises(CommandError, match="GPUSCHED_AGENT_SECRET"):
        call_command("agent_token", "gpu-01")


# --- Login rate limit --------------------------------------------------------------------------


@pytest.fixture
def throttle(settings):  # noqa: ANN001
    from django.core.cache import caches

    settings.LOGIN_MAX_FAILURES = 3
    settings.LOGIN_MAX_FAILURES_PER_IP = 10
    settings.LOGIN_LOCKOUT_SECONDS = 900
    caches["login-throttle"].clear()
    yield settings
    with contextlib.suppress(Exception):  # a test may have pointed the cache at a dead server
        caches["login-throttle"].clear()


def _login(username: str, password: str, address: str = "10.0.0.1", path: str = "/accounts/login/"):  # noqa: ANN202
    from django.test import Client

    client = Client(REMOTE_ADDR=address)
    response = client.post(path, {"username": username, "password": password, "next": "/jobs/"})
    return client, response


def test_repeated_failures_lock_the_username_out_from_that_address(throttle, roles, password) -> None:
    for _ in range(3):
        assert _login("alice", "wrong")[1].status_code == 200
    client, response = _login("alice", password)  # the right password, during the lockout
    assert response.status_code == 429
    assert int(response["Retry-After"]) > 0
    assert "Too many failed login attempts" in response.content.decode()
    assert client.get("/jobs/").status_code == 302  # not logged in
    assert _login("alice", password, address="10.0.0.2")[1].status_code == 302  # another address
    assert _login("bob", password)[1].status_code == 302  # another user from the same address


def test_a_success_clears_the_failures(throttle, roles, password) -> None:
    for _ in range(2):
        _login("alice", "wrong")
    assert _login("alice", password)[1].status_code == 302
    for _ in range(2):
        _login("alice", "wrong")
    assert _login("alice", password)[1].status_code == 302


def test_spraying_many_usernames_locks_the_address_out(throttle, roles, password) -> None:
    for i in range(10):
        _login(f"user{i}", "wrong")
    response = _login("carol", password)[1]
    assert response.status_code == 429 and "from your address" in response.content.decode()


def test_the_admin_login_is_rate_limited_too(throttle, roles, password) -> None:
    for _ in range(3):
        _login("carol", "wrong", path="/admin/login/")
    client, response = _login("carol", password, path="/admin/login/")
    assert "Too many failed login attempts" in response.content.decode()
    assert client.get("/admin/").status_code == 302


def test_the_lockout_ends_after_its_window(throttle, roles, password) -> None:
    import time

    throttle.LOGIN_LOCKOUT_SECONDS = 1
    for _ in range(3):
        _login("alice", "wrong")
    assert _login("alice", password)[1].status_code == 429
    time.sleep(1.5)
    assert _login("alice", password)[1].status_code == 302


def test_counters_are_shared_through_redis(throttle, roles, password, redis_url) -> None:
    """The production cache: the counters are in Redis, so every web process sees them."""
    from django.core.cache import caches

    throttle.CACHES = {**throttle.CACHES, "login-throttle": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": redis_url,
        "KEY_PREFIX": f"adv-test-{timezone.now().timestamp()}"}}
    try:
        for _ in range(3):
            _login("alice", "wrong", address="10.9.9.9")
        response = _login("alice", password, address="10.9.9.9")[1]
        assert response.status_code == 429
        assert 0 < int(response["Retry-After"]) <= 900
    finally:
        caches["login-throttle"].clear()


def test_an_unreachable_counter_store_does_not_lock_everyone_out(throttle, roles, password, caplog) -> None:
    throttle.CACHES = {**throttle.CACHES, "login-throttle": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": "redis://127.0.0.1:1/0"}}
    assert _login("alice", "wrong")[1].status_code == 200
    assert _login("alice", password)[1].status_code == 302
    assert "login throttle unavailable" in caplog.text


# --- Revoking sessions and tokens --------------------------------------------------------------


def _session_client(username: str, password: str):  # noqa: ANN202
    from django.test import Client

    client = Client()
    assert client.post("/accounts/login/", {"username": username, "password": password}).status_code == 302
    assert client.get("/jobs/").status_code == 200
    return client


def _stolen_copy(client):  # noqa: ANN001, ANN202
    """Another client carrying the same session cookie (a copied cookie)."""
    from django.conf import settings
    from django.test import Client

    thief = Client()
    thief.cookies[settings.SESSION_COOKIE_NAME] = client.cookies[settings.SESSION_COOKIE_NAME].value
    return thief


def test_logout_ends_the_session_everywhere_it_was_copied(roles, password) -> None:
    client = _session_client("alice", password)
    thief = _stolen_copy(client)
    assert thief.get("/jobs/").status_code == 200
    client.post("/accounts/logout/")
    assert thief.get("/jobs/").status_code == 302
    assert thief.get("/api/v1/jobs/").status_code in (401, 403)


def test_a_password_change_ends_other_sessions(roles, password) -> None:
    thief = _stolen_copy(_session_client("alice", password))
    roles.owner.set_password("a-brand-new-password-77")
    roles.owner.save()
    assert thief.get("/jobs/").status_code == 302


def test_revoke_access_ends_sessions_revokes_tokens_and_can_deactivate(roles, password, api_as) -> None:
    from io import StringIO
    from django.test import Client

    session = _session_client("alice", password)
    bobs = _session_client("bob", password)
    _, key = ApiToken.issue(roles.owner, "laptop")
    _, other_key = ApiToken.issue(roles.owner, "cluster script")
    _, bobs_key = ApiToken.issue(roles.other, "bob's")
    api = Client(HTTP_AUTHORIZATION=f"Token {key}")
    assert api.get("/api/v1/jobs/").status_code == 200

    out = StringIO()
    call_command("revoke_access", "alice", stdout=out)
    assert "1 session(s) ended, 2 token(s) revoked" in out.getvalue()
    assert session.get("/jobs/").status_code == 302
    for k in (key, other_key):
        response = Client(HTTP_AUTHORIZATION=f"Token {k}").get("/api/v1/jobs/")
        assert response.status_code == 401 and response.json()["detail"] == "Invalid or revoked token."
    assert bobs.get("/jobs/").status_code == 200  # nobody else is affected
    assert Client(HTTP_AUTHORIZATION=f"Token {bobs_key}").get("/api/v1/jobs/").status_code == 200
    assert _login("alice", password)[1].status_code == 302  # without --deactivate she may log in again

    call_command("revoke_access", "alice", "--deactivate", stdout=StringIO())
    assert _login("alice", password)[1].status_code == 200  # refused with the form's message
    with pytest.raises(CommandError, match="no user"):
        call_command("revoke_access", "nobody")


@pytest.mark.django_db(transaction=True)
def test_a_revoked_session_is_closed_by_the_websocket_routes(roles, password, memory_layer) -> None:
    from channels.testing import WebsocketCommunicator
    from django.conf import settings

    from portal.access import revoke_access
    from portal.asgi import application

    client = _session_client("alice", password)
    cookie = f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}".encode()
    headers = [(b"origin", b"http://localhost"), (b"host", b"localhost"), (b"cookie", cookie)]

    async def first_message() -> dict:
        communicator = WebsocketCommunicator(application, "/ws/cluster/", headers=headers)
        await communicator.connect(5)
        output = await communicator.receive_output(5)
        await communicator.disconnect()
        return output

    assert async_to_sync(first_message)()["type"] == "websocket.send"
    revoke_access(roles.owner)
    assert async_to_sync(first_message)() == {"type": "websocket.close", "code": 4401}


# --- Sockets already open when access ends ---------------------------------------------------------


def _open_socket_scenario(headers: list, path: str, cut_off, then_push=None) -> list[dict]:  # noqa: ANN001
    """Open ``path`` with ``headers``, read the first state, run ``cut_off()`` (sync, committed),
    then, if given, ``then_push()``; return what the socket sends next (a close, or a state)."""
    from asgiref.sync import sync_to_async
    from channels.testing import WebsocketCommunicator

    from portal.asgi import application

    async def scenario() -> list[dict]:
        communicator = WebsocketCommunicator(application, path, headers=headers)
        connected, _ = await communicator.connect(5)
        assert connected
        first = await communicator.receive_output(5)
        assert first["type"] == "websocket.send"
        await sync_to_async(cut_off)()
        if then_push is not None:
            await sync_to_async(then_push)()
        outputs = [await communicator.receive_output(5)]
        if outputs[0]["type"] == "websocket.close":
            assert await communicator.receive_nothing(0.5)  # and nothing after it
        await communicator.disconnect()
        return outputs

    return async_to_sync(scenario)()


def _session_headers(username: str, password: str) -> list:
    from django.conf import settings

    client = _session_client(username, password)
    cookie = f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}".encode()
    return [(b"origin", b"http://localhost"), (b"host", b"localhost"), (b"cookie", cookie)]


CLOSED = [{"type": "websocket.close", "code": 4401}]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("deactivate", [False, True], ids=["sessions-ended", "deactivated"])
@pytest.mark.parametrize("page", ["/ws/cluster/", "/ws/latency/", "/ws/jobs/{job}/"])
def test_revoking_access_closes_the_users_open_sockets_at_once(roles, password, make_job, memory_layer, page,
                                                               deactivate) -> None:
    """revoke_access (the command's service) closes every live page the user has open, with no push
    needed; another user's socket stays open and keeps receiving."""
    from io import StringIO

    job = make_job(roles.owner)
    path = page.format(job=job.pk)
    args = ["revoke_access", "alice", *(["--deactivate"] if deactivate else [])]
    assert _open_socket_scenario(_session_headers("alice", password), path,
                                 lambda: call_command(*args, stdout=StringIO())) == CLOSED


@pytest.mark.django_db(transaction=True)
def test_someone_elses_revocation_leaves_a_socket_open(roles, password, memory_layer) -> None:
    from io import StringIO

    from portal import realtime

    (output,) = _open_socket_scenario(_session_headers("bob", password), "/ws/cluster/",
                                      lambda: call_command("revoke_access", "alice", stdout=StringIO()),
                                      then_push=realtime.publish_cluster_changed)
    assert output["type"] == "websocket.send" and '"cluster"' in output["text"]


def _end_sessions_directly(user) -> None:  # noqa: ANN001
    from django.contrib.sessions.models import Session

    from portal.access import user_sessions

    Session.objects.filter(session_key__in=user_sessions(user)).delete()


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("how", ["session-deleted", "password-changed", "deactivated-in-admin"])
@pytest.mark.parametrize("page", ["/ws/cluster/", "/ws/latency/", "/ws/jobs/{job}/"])
def test_a_socket_whose_session_ended_otherwise_gets_no_more_data(roles, password, make_job, memory_layer, page,
                                                                  how) -> None:
    """Access ended without the revocation service (no close hint): the next push finds the session
    gone, the password changed or the account inactive, and closes instead of sending state."""
    from portal import realtime

    job = make_job(roles.owner)
    user = roles.owner

    def cut_off() -> None:
        if how == "session-deleted":
            _end_sessions_directly(user)
        elif how == "password-changed":
            user.set_password("a-brand-new-password-77")
            user.save()
        else:
            type(user).objects.filter(pk=user.pk).update(is_active=False)

    def push() -> None:
        realtime.publish_job_changed(job.pk)  # reaches the cluster, latency and job pages

    assert _open_socket_scenario(_session_headers("alice", password), page.format(job=job.pk), cut_off,
                                 then_push=push) == CLOSED
