"""WebSocket consumers: the same permissions as the pages, full state on connect, fresh state on hints."""

from __future__ import annotations

import json

import pytest
from asgiref.sync import async_to_sync, sync_to_async

from portal import realtime
from portal.dashboard import selectors as dashboard_selectors

pytestmark = pytest.mark.django_db(transaction=True)

TIMEOUT = 5  # generous: a slow shared machine must not fail a correct consumer


def run(coro_fn):  # noqa: ANN001, ANN201
    return async_to_sync(coro_fn)()


async def expect_close(communicator, code: int) -> None:  # noqa: ANN001
    output = await communicator.receive_output(TIMEOUT)
    assert output == {"type": "websocket.close", "code": code}


def test_anonymous_is_closed_with_4401_on_every_route(ws_connect, roles, make_job):
    job = make_job(roles.owner)

    async def scenario() -> None:
        for path in ("/ws/cluster/", "/ws/latency/", f"/ws/jobs/{job.pk}/"):
            communicator, connected = await ws_connect(path, None)
            assert connected
            await expect_close(communicator, 4401)
            await communicator.disconnect()

    run(scenario)


def test_job_socket_of_someone_elses_job_closes_like_a_404(ws_connect, roles, make_job):
    job = make_job(roles.owner)

    async def scenario() -> None:
        communicator, _ = await ws_connect(f"/ws/jobs/{job.pk}/", roles.other)
        await expect_close(communicator, 4404)
        missing, _ = await ws_connect("/ws/jobs/999999/", roles.owner)
        await expect_close(missing, 4404)
        staff, _ = await ws_connect(f"/ws/jobs/{job.pk}/", roles.staff)
        message = await staff.receive_json_from(TIMEOUT)
        assert message["type"] == "job" and message["state"]["id"] == job.pk
        await staff.disconnect()

    run(scenario)


def test_cluster_socket_shows_others_jobs_without_command_or_link(ws_connect, roles, make_job, make_node):
    from cluster.models import Gpu
    from scheduler.models import JobState

    make_node("n1", 2)
    mine = make_job(roles.owner, state=JobState.RUNNING, job_class="TE", command="secret-of-alice")
    theirs = make_job(roles.other, state=JobState.RUNNING, job_class="BE", command="secret-of-bob")
    Gpu.objects.filter(node__name="n1", index=0).update(allocated_to=mine)
    Gpu.objects.filter(node__name="n1", index=1).update(allocated_to=theirs)
    waiting = make_job(roles.other, name="queued-one", command="secret-of-bob-2")

    async def scenario() -> None:
        communicator, _ = await ws_connect("/ws/cluster/", roles.owner)
        message = await communicator.receive_json_from(TIMEOUT)
        await communicator.disconnect()
        assert message["type"] == "cluster"
        assert "secret" not in json.dumps(message)
        cells = {g["index"]: g for g in message["state"]["nodes"][0]["gpus"]}
        holders = {g["index"]: message["state"]["jobs"][str(g["job_id"])] for g in cells.values()}
        assert cells[0]["status"] == "TE" and holders[0]["url"] == f"/jobs/{mine.pk}/"
        assert cells[1]["status"] == "BE" and holders[1]["owner"] == "bob" and holders[1]["url"] is None
        queued = message["state"]["queue"]["BE"]["jobs"]
        assert [(j["id"], j["position"], j["url"]) for j in queued] == [(waiting.pk, 1, None)]

    run(scenario)


def test_cluster_socket_pushes_a_new_state_after_a_hint(ws_connect, roles, make_job):
    async def scenario() -> None:
        communicator, _ = await ws_connect("/ws/cluster/", roles.owner)
        first = await communicator.receive_json_from(TIMEOUT)
        assert first["state"]["queue"]["TE"]["count"] == 0
        # A submission: its JobEvent publishes through the signal, on commit.
        job = await sync_to_async(make_job)(roles.owner, job_class="TE", name="fresh")
        second = await communicator.receive_json_from(TIMEOUT)
        await communicator.disconnect()
        assert [j["id"] for j in second["state"]["queue"]["TE"]["jobs"]] == [job.pk]

    run(scenario)


def test_a_page_asking_for_changes_gets_the_state_once_then_what_changed(ws_connect, roles, make_job, make_node):
    """``?changes=1``: the whole state first, then ``cluster-changes`` that, applied to what the page holds,
    give the state a page connecting afresh gets; a node nothing happened on is not sent again."""
    from cluster.models import Gpu
    from portal.dashboard.cluster_delta import apply_changes
    from scheduler.models import JobState

    make_node("n1", 2)
    make_node("n2", 2)
    running = make_job(roles.other, state=JobState.RUNNING, job_class="BE")
    Gpu.objects.filter(node__name="n2").update(allocated_to=running)

    async def scenario() -> None:
        page, _ = await ws_connect("/ws/cluster/?changes=1", roles.owner)
        first = await page.receive_json_from(TIMEOUT)
        assert first["type"] == "cluster"
        held = first["state"]
        mine = await sync_to_async(make_job)(roles.owner, job_class="TE", name="fresh")  # within the hints' throttle:
        await sync_to_async(realtime.publish_cluster_changed)()  # the cycle's hint
        second = await page.receive_json_from(TIMEOUT)
        assert second["type"] == "cluster-changes" and "state" not in second
        assert second["changes"]["nodes"] == [] and second["changes"]["jobs"] == {}  # no GPU changed hands
        held = apply_changes(held, second["changes"])
        assert [j["id"] for j in held["queue"]["TE"]["jobs"]] == [mine.pk]
        await sync_to_async(Gpu.objects.filter(node__name="n1", index=0).update)(allocated_to=mine)
        await sync_to_async(realtime.publish_cluster_changed)()
        third = await page.receive_json_from(TIMEOUT)
        assert [n["name"] for n in third["changes"]["nodes"]] == ["n1"]
        assert list(third["changes"]["jobs"]) == [str(mine.pk)]
        held = apply_changes(held, third["changes"])
        afresh, _ = await ws_connect("/ws/cluster/", roles.owner)
        whole = (await afresh.receive_json_from(TIMEOUT))["state"]
        for other in (page, afresh):
            await other.disconnect()
        assert {k: v for k, v in held.items() if k not in ("generated_at", "utilization")} == {
            k: v for k, v in whole.items() if k not in ("generated_at", "utilization")}

    run(scenario)


def test_a_staff_member_demoted_loses_what_only_staff_see_at_the_next_push(ws_connect, roles, make_job):
    """Rights are read afresh before each push: the cluster page stops linking others' jobs and another
    user's job page closes as not found, without reconnecting."""
    from django.contrib.auth import get_user_model

    theirs = make_job(roles.other, name="bobs-queued")

    async def scenario() -> None:
        cluster, _ = await ws_connect("/ws/cluster/", roles.staff)
        first = await cluster.receive_json_from(TIMEOUT)
        assert first["state"]["queue"]["BE"]["jobs"][0]["url"] == f"/jobs/{theirs.pk}/"
        page, _ = await ws_connect(f"/ws/jobs/{theirs.pk}/", roles.staff)
        assert (await page.receive_json_from(TIMEOUT))["type"] == "job"
        await sync_to_async(get_user_model().objects.filter(pk=roles.staff.pk).update)(is_staff=False)
        await sync_to_async(realtime.publish_cluster_changed)()
        await sync_to_async(realtime.publish_job_changed)(theirs)
        second = await cluster.receive_json_from(TIMEOUT)
        assert second["state"]["queue"]["BE"]["jobs"][0]["url"] is None
        await expect_close(page, 4404)
        await cluster.disconnect()

    run(scenario)


def test_burst_of_hints_gives_one_refresh(ws_connect, roles):
    async def scenario() -> None:
        communicator, _ = await ws_connect("/ws/cluster/", roles.owner)
        await communicator.receive_json_from(TIMEOUT)
        for _ in range(20):
            await sync_to_async(realtime.publish_cluster_changed)()
        await communicator.receive_json_from(TIMEOUT)
        assert await communicator.receive_nothing(timeout=0.5)
        await communicator.disconnect()

    run(scenario)


def test_job_socket_streams_new_log_lines_once_and_resets_on_a_new_attempt(ws_connect, roles, make_job):
    from scheduler.models import Attempt, AttemptLog, JobEvent, JobState

    job = make_job(roles.owner, state=JobState.RUNNING)
    first_attempt = Attempt.objects.get(job=job)
    AttemptLog.objects.create(attempt=first_attempt, text="line 1\nline 2")

    def add_log(attempt, text: str) -> None:  # noqa: ANN001
        AttemptLog.objects.create(attempt=attempt, text=text)

    def new_attempt() -> Attempt:
        attempt = Attempt.objects.create(job=job, number=2, gpu_allocation={"n1": [0]})
        JobEvent.objects.create(job=job, from_state=JobState.PENDING, to_state=JobState.STARTING)
        return attempt

    async def scenario() -> None:
        communicator, _ = await ws_connect(f"/ws/jobs/{job.pk}/", roles.owner)
        state = await communicator.receive_json_from(TIMEOUT)
        assert state["type"] == "job" and state["state"]["state"] == "RUNNING"
        log = await communicator.receive_json_from(TIMEOUT)
        assert log == {"type": "log", "attempt": 1, "lines": ["line 1", "line 2"], "reset": True, "truncated": False}

        await sync_to_async(add_log)(first_attempt, "line 3")
        log = await communicator.receive_json_from(TIMEOUT)
        assert log["lines"] == ["line 3"] and log["reset"] is False

        second = await sync_to_async(new_attempt)()
        state = await communicator.receive_json_from(TIMEOUT)
        assert [a["number"] for a in state["state"]["attempts"]] == [1, 2]
        assert state["state"]["events"][-1]["state"] == "STARTING"
        log = await communicator.receive_json_from(TIMEOUT)
        assert log == {"type": "log", "attempt": 2, "lines": [], "reset": True, "truncated": False}

        await sync_to_async(add_log)(second, "resumed at step 40")
        log = await communicator.receive_json_from(TIMEOUT)
        assert log["attempt"] == 2 and log["lines"] == ["resumed at step 40"]
        assert await communicator.receive_nothing(timeout=0.3)
        await communicator.disconnect()

    run(scenario)


def test_job_socket_sends_only_the_newest_lines_when_more_arrived_than_a_page_holds(ws_connect, roles, make_job,
                                                                                     monkeypatch):
    from portal.dashboard import job_page
    from scheduler.models import Attempt, AttemptLog, JobState

    monkeypatch.setattr(job_page, "LOG_TAIL_LINES", 3)
    job = make_job(roles.owner, state=JobState.RUNNING)
    attempt = Attempt.objects.get(job=job)
    AttemptLog.objects.create(attempt=attempt, text="a\nb")

    async def scenario() -> None:
        communicator, _ = await ws_connect(f"/ws/jobs/{job.pk}/", roles.owner)
        await communicator.receive_json_from(TIMEOUT)  # state
        log = await communicator.receive_json_from(TIMEOUT)
        assert (log["lines"], log["reset"], log["truncated"]) == (["a", "b"], True, False)
        await sync_to_async(AttemptLog.objects.create)(attempt=attempt, text="c\nd\ne\nf\ng")
        log = await communicator.receive_json_from(TIMEOUT)
        assert (log["lines"], log["reset"], log["truncated"]) == (["e", "f", "g"], True, True)  # drawn again, marked
        await communicator.disconnect()

    run(scenario)


def test_job_socket_ignores_hints_for_other_jobs_of_its_shard(ws_connect, roles, make_job):
    from scheduler.models import JobState

    job = make_job(roles.owner, state=JobState.RUNNING)
    neighbour = job.pk + realtime.JOB_SHARDS  # same group, another job

    async def scenario() -> None:
        communicator, _ = await ws_connect(f"/ws/jobs/{job.pk}/", roles.owner)
        await communicator.receive_json_from(TIMEOUT)  # state
        await communicator.receive_json_from(TIMEOUT)  # log
        await sync_to_async(realtime.publish_job_changed)(neighbour)
        await sync_to_async(realtime.publish_log_lines)(neighbour, 1)
        assert await communicator.receive_nothing(timeout=0.5)
        await sync_to_async(realtime.publish_job_changed)(job.pk)
        state = await communicator.receive_json_from(TIMEOUT)
        assert state["type"] == "job" and state["state"]["id"] == job.pk
        await communicator.disconnect()

    run(scenario)


def test_latency_socket_takes_its_window_from_the_query_and_from_messages(ws_connect, roles):
    async def scenario() -> None:
        communicator, _ = await ws_connect("/ws/latency/?window=3600", roles.owner)
        message = await communicator.receive_json_from(TIMEOUT)
        assert message["type"] == "latency" and message["state"]["window_s"] == 3600
        await communicator.send_json_to({"window": 900})
        message = await communicator.receive_json_from(TIMEOUT)
        assert message["state"]["window_s"] == 900
        await communicator.send_json_to({"window": 5})
        message = await communicator.receive_json_from(TIMEOUT)
        assert message["type"] == "error" and "window" in message["message"]
        await communicator.disconnect()

    run(scenario)


def test_latency_pages_of_one_window_share_one_read_per_change(ws_connect, roles, make_job):
    """The latency figures are the same for every viewer: the pages of a window that refresh after the same
    change make one read between them, and each still shows the change."""
    from portal import consumers

    async def scenario() -> None:
        pages = [(await ws_connect("/ws/latency/?window=3600", user))[0]
                 for user in (roles.owner, roles.other, roles.staff)]
        for page in pages:
            assert (await page.receive_json_from(TIMEOUT))["state"]["waiting"]["BE"]["count"] == 0
        before = consumers.LATENCY_READS[3600].reads
        await sync_to_async(make_job)(roles.other, name="waits")  # a submission's hint reaches every page
        latest = [(await page.receive_json_from(TIMEOUT))["state"] for page in pages]
        assert consumers.LATENCY_READS[3600].reads - before < len(pages)
        assert all(state["waiting"]["BE"]["count"] == 1 for state in latest)
        for page in pages:
            await page.disconnect()

    run(scenario)


def test_full_asgi_application_authenticates_with_the_session_cookie(roles, memory_layer, client):
    """Through portal.asgi: origin check and session authentication, as the browser connects."""
    from channels.testing import WebsocketCommunicator
    from django.conf import settings

    from portal.asgi import application

    client.force_login(roles.owner)
    cookie = f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"

    async def scenario() -> None:
        headers = [(b"origin", b"http://localhost"), (b"host", b"localhost"), (b"cookie", cookie.encode())]
        communicator = WebsocketCommunicator(application, "/ws/cluster/", headers=headers)
        connected, _ = await communicator.connect(TIMEOUT)
        assert connected
        message = await communicator.receive_json_from(TIMEOUT)
        assert message["type"] == "cluster"
        await communicator.disconnect()

        stranger = WebsocketCommunicator(application, "/ws/cluster/", headers=[(b"origin", b"http://evil.example")])
        connected, _ = await stranger.connect(TIMEOUT)
        assert not connected  # refused by the allowed-hosts origin check

    run(scenario)


def test_cluster_socket_sends_a_fresh_state_when_the_page_asks(ws_connect, roles):
    async def scenario() -> None:
        communicator, _ = await ws_connect("/ws/cluster/", roles.owner)
        first = await communicator.receive_json_from(TIMEOUT)
        await communicator.send_json_to({"type": "refresh"})
        second = await communicator.receive_json_from(TIMEOUT)
        assert second["type"] == "cluster" and second["state"]["generated_at"] > first["state"]["generated_at"]
        await communicator.send_json_to({"type": "something-else"})
        assert await communicator.receive_nothing(timeout=0.3)
        await communicator.disconnect()

    run(scenario)


def test_job_socket_pushes_progress_after_a_report_and_only_for_its_job(ws_connect, roles, make_job):
    from django.utils import timezone

    from jobprogress import services
    from scheduler.models import JobState

    job = make_job(roles.owner, state=JobState.RUNNING)
    neighbour = make_job(roles.owner, state=JobState.RUNNING)

    def report(job_id: int, step: int) -> None:
        services.record_progress(job_id, 1, {"t": float(step), "step": step, "total_steps": 10,
                                             "metrics": {"loss": 1.0 / step}}, timezone.now())

    async def scenario() -> None:
        communicator, _ = await ws_connect(f"/ws/jobs/{job.pk}/", roles.owner)
        assert (await communicator.receive_json_from(TIMEOUT))["type"] == "job"
        assert (await communicator.receive_json_from(TIMEOUT))["type"] == "log"
        assert await communicator.receive_nothing(timeout=0.3)  # no progress before the first report
        await sync_to_async(report)(neighbour.pk, 3)
        assert await communicator.receive_nothing(timeout=0.5)
        await sync_to_async(report)(job.pk, 4)
        message = await communicator.receive_json_from(TIMEOUT)
        assert message["type"] == "progress"
        assert (message["progress"]["step"], message["progress"]["fraction"]) == (4, 0.4)
        assert message["progress"]["history"]["metrics"]["loss"] == [0.25]
        await communicator.disconnect()

    run(scenario)


def test_cluster_pages_refreshing_after_one_change_share_one_read_and_each_sees_its_own(
        ws_connect, roles, make_job):
    """Three pages, two viewers: one hint, one read of the cluster for the three; each page gets the links
    its viewer may see, and a read from before a change is never served after it."""
    from portal import consumers

    async def scenario() -> None:
        pages = [(await ws_connect("/ws/cluster/", user))[0] for user in (roles.owner, roles.other, roles.owner)]
        for page in pages:
            await page.receive_json_from(TIMEOUT)
        before = consumers.CLUSTER_READ.reads
        job = await sync_to_async(make_job)(roles.owner, name="fresh")  # its event hints on commit
        states = [(await page.receive_json_from(TIMEOUT))["state"] for page in pages]
        # One read, unless a page heard the hint only after another's read began (a loaded machine): never
        # one per page.
        assert 1 <= consumers.CLUSTER_READ.reads - before < len(pages)
        seen = [{j["id"]: (j["mine"], j["url"]) for j in state["queue"]["BE"]["jobs"]} for state in states]
        assert seen[0][job.pk] == seen[2][job.pk] == (True, f"/jobs/{job.pk}/")
        assert seen[1][job.pk] == (False, None)
        assert all("owner_id" not in j for state in states for j in state["queue"]["BE"]["jobs"])
        second = await sync_to_async(make_job)(roles.other, name="later")  # within the submission hints' throttle:
        await sync_to_async(realtime.publish_cluster_changed)()  # the next hint, as the cycle's would be
        latest = [(await page.receive_json_from(TIMEOUT))["state"] for page in pages]
        assert consumers.CLUSTER_READ.reads - before < 2 * len(pages)
        assert all(second.pk in {j["id"] for j in state["queue"]["BE"]["jobs"]} for state in latest)
        for page in pages:
            await page.disconnect()

    run(scenario)


def test_a_large_cluster_state_is_pushed_at_most_at_the_byte_rate(ws_connect, roles, monkeypatch):
    """After a push of the whole state, the next waits its size over CLUSTER_PUSH_BYTES_PER_S; a small
    state keeps the 100 ms coalescing."""
    from portal import consumers

    assert consumers.push_interval(20_000) == consumers.DEBOUNCE_S
    assert consumers.push_interval(1_700_000) == 1_700_000 / consumers.CLUSTER_PUSH_BYTES_PER_S
    # The rate that puts about 3 s after a push of this state, however large an empty cluster's state is.
    state = dashboard_selectors.for_viewer(dashboard_selectors.shared_cluster_state(), roles.owner)
    size = len(json.dumps({"type": "cluster", "state": state}))
    monkeypatch.setattr(consumers, "CLUSTER_PUSH_BYTES_PER_S", size / 3)

    async def scenario() -> None:
        communicator, _ = await ws_connect("/ws/cluster/", roles.owner)
        await communicator.receive_json_from(TIMEOUT)
        await sync_to_async(realtime.publish_cluster_changed)()
        assert await communicator.receive_nothing(timeout=1.5)  # held back by the byte rate
        message = await communicator.receive_json_from(TIMEOUT)  # and then sent
        assert message["type"] == "cluster"
        await communicator.disconnect()

    run(scenario)


def test_a_state_longer_than_one_message_may_be_arrives_in_parts_that_join_into_it(ws_connect, roles, make_job,
                                                                                  monkeypatch):
    """daphne refuses to send a WebSocket message over 1 MiB (a 1,000-node cluster's state is 1.7 MB):
    a longer one goes as parts, in order, whose texts joined are the whole message."""
    from portal.consumers import message_parts

    text = json.dumps({"type": "cluster", "state": {"x": "y" * 1000}})
    parts = message_parts(text, 7, 300)
    assert [(p["id"], p["index"], p["count"]) for p in parts] == [(7, i, 4) for i in range(4)]
    assert "".join(p["text"] for p in parts) == text and all(len(p["text"]) <= 300 for p in parts)
    monkeypatch.setattr("portal.consumers.LIVE_MESSAGE_MAX_CHARS", 500)
    make_job(roles.owner, name="a-name-to-find")

    async def scenario() -> None:
        communicator, _ = await ws_connect("/ws/cluster/", roles.owner)
        first = await communicator.receive_json_from(TIMEOUT)
        assert first["type"] == "part" and first["index"] == 0 and first["count"] > 1
        texts = [first["text"]]
        for index in range(1, first["count"]):
            part = await communicator.receive_json_from(TIMEOUT)
            assert (part["type"], part["id"], part["index"]) == ("part", first["id"], index)
            texts.append(part["text"])
        whole = json.loads("".join(texts))
        await communicator.disconnect()
        assert whole["type"] == "cluster"
        assert [j["name"] for j in whole["state"]["queue"]["BE"]["jobs"]] == ["a-name-to-find"]

    run(scenario)


def test_every_live_page_sends_a_long_message_in_parts(ws_connect, roles, make_job, monkeypatch):
    """The limit is the socket's, not the cluster page's: a job page's state goes in parts too."""
    job = make_job(roles.owner, name="long-enough")
    monkeypatch.setattr("portal.consumers.LIVE_MESSAGE_MAX_CHARS", 200)

    async def scenario() -> None:
        communicator, _ = await ws_connect(f"/ws/jobs/{job.pk}/", roles.owner)
        first = await communicator.receive_json_from(TIMEOUT)
        assert first["type"] == "part" and first["count"] > 1
        texts = [first["text"]] + [(await communicator.receive_json_from(TIMEOUT))["text"]
                                   for _ in range(first["count"] - 1)]
        await communicator.disconnect()
        whole = json.loads("".join(texts))
        assert whole["type"] == "job" and whole["state"]["id"] == job.pk

    run(scenario)
