"""The server's own tasks sealed: what a seal covers, that every server task is gated and every report is not,
and, with a real worker and a real agent, that a webhook call queued by a process without the server's key
is not made while the same message sealed is."""

from __future__ import annotations

import logging
import uuid
from types import SimpleNamespace
from typing import Any

import pytest
from celery.signals import before_task_publish

from cluster import protocol, task_seal
from cluster.task_seal import HEADER, SealedTask, seal, seal_outgoing, verifies

BODY = ([7, [1, 2]], {"why": "x"}, {"callbacks": None})


def published(routing_key: str, body: Any = BODY) -> dict[str, Any]:
    headers = {"task": "notifications.dispatch", "id": "abc"}
    seal_outgoing(sender="notifications.dispatch", body=body, headers=headers, routing_key=routing_key)
    return headers


def received(headers: dict[str, Any], args: Any = ([7, [1, 2]]), kwargs: Any = None) -> SimpleNamespace:
    """A worker's request for ``headers`` after the broker's JSON round trip (tuples became lists)."""
    return SimpleNamespace(id=headers["id"], args=list(args), kwargs={"why": "x"} if kwargs is None else kwargs,
                           called_directly=False, is_eager=False, **{k: v for k, v in headers.items() if k == HEADER})


def test_a_server_task_message_is_sealed_and_verifies_as_the_worker_receives_it() -> None:
    headers = published("celery")
    assert verifies("notifications.dispatch", received(headers))
    # tuples arrive as lists: the seal is over the JSON form, so a tuple sent verifies as the list received
    assert verifies("notifications.dispatch", received(published("celery", ((7, (1, 2)), {"why": "x"}, {}))))


@pytest.mark.parametrize("change", ["args", "kwargs", "id", "task", "missing", "garbage"])
def test_a_seal_does_not_verify_for_other_arguments_another_id_or_task_or_when_absent(change: str) -> None:
    headers = published("celery")
    request = received(headers)
    task = "notifications.dispatch"
    if change == "args":
        request.args = [list(range(100000))]
    elif change == "kwargs":
        request.kwargs = {"why": "y"}
    elif change == "id":
        request.id = "abd"
    elif change == "task":
        task = "notifications.deliver_webhook"
    elif change == "missing":
        delattr(request, HEADER)
    else:
        setattr(request, HEADER, "0" * 64)
    assert not verifies(task, request)


def test_commands_to_nodes_are_not_sealed_they_are_signed_per_node() -> None:
    assert HEADER not in published(protocol.node_queue("gpu-07"))
    assert HEADER in published("celery") and HEADER in published("simulations")


def test_a_seal_made_under_another_key_fails_and_one_under_a_fallback_verifies(settings) -> None:
    headers = published("celery")
    settings.SECRET_KEY = "a-new-key-after-rotation-" + "x" * 40
    assert not verifies("notifications.dispatch", received(headers))
    settings.SECRET_KEY_FALLBACKS = ["an-unrelated-key-" + "y" * 40,
                                     "insecure-debug-only-key-do-not-use-in-production"]
    old = seal("notifications.dispatch", "abc", [7, [1, 2]], {"why": "x"},
               secret="insecure-debug-only-key-do-not-use-in-production")
    assert verifies("notifications.dispatch", received({"id": "abc", HEADER: old}))


def test_every_task_of_the_server_app_is_gated_and_exactly_the_reports_come_from_nodes() -> None:
    from portal.celery import app

    app.loader.import_default_modules()
    ours = {name: task for name, task in app.tasks.items() if not name.startswith("celery.")}
    assert all(isinstance(task, SealedTask) for task in app.tasks.values())
    from_nodes = {name for name, task in ours.items() if task.from_nodes}
    reports = {getattr(protocol, n) for n in dir(protocol) if n.startswith("REPORT_") and n != "REPORT_QUEUE"}
    from cluster import session_contract

    assert from_nodes == reports | {session_contract.REPORT_SESSION}
    assert {"notifications.dispatch", "notifications.deliver_webhook"} <= set(ours) - from_nodes


def _run(task: Any, request: dict[str, Any], *args: Any) -> Any:
    task.push_request(**request)
    try:
        return task(*args)
    finally:
        task.pop_request()


def test_a_received_server_task_runs_only_sealed_and_a_direct_call_is_not_checked(monkeypatch, caplog) -> None:
    from notifications import tasks
    from portal.celery import app

    calls: list[list[int]] = []
    monkeypatch.setattr(tasks.services, "dispatch", lambda ids: calls.append(list(ids)) or [])
    monkeypatch.setattr(task_seal, "_last_audit", {"notifications.dispatch": float("inf")})  # no audit row here
    task = app.tasks["notifications.dispatch"]
    forged = {"id": "f1", "args": [[5, 6]], "kwargs": {}, "called_directly": False, "is_eager": False}
    with caplog.at_level(logging.ERROR, logger="cluster.task_seal"):
        assert _run(task, forged, [5, 6]) is None
    assert calls == []
    assert "task notifications.dispatch (f1) not run: it carries no seal" in caplog.text
    sealed = dict(forged, **{HEADER: seal("notifications.dispatch", "f1", [[5, 6]], {})})
    _run(task, sealed, [5, 6])
    assert calls == [[5, 6]]
    task([8])  # a call in the same process is not a message
    assert calls == [[5, 6], [8]]


@pytest.mark.django_db
def test_a_refused_task_is_audited_once_a_minute_per_task_name(monkeypatch) -> None:
    from audit.models import Action, AuditEntry

    monkeypatch.setattr(task_seal, "_last_audit", {})
    for i in range(3):
        task_seal.refuse("scheduler.run_cycle", f"id{i}", "unsealed")
    task_seal.refuse("notifications.dispatch", "id9", "sealed")
    rows = AuditEntry.objects.filter(action=Action.TASK_REFUSED).order_by("pk")
    assert [(r.target, r.detail.split(":")[0]) for r in rows] == [
        ("task scheduler.run_cycle", "id0"), ("task notifications.dispatch", "id9")]
    assert "does not verify" in rows[1].detail and "no seal" in rows[0].detail


@pytest.mark.e2e
@pytest.mark.postgres
@pytest.mark.redis
def test_a_real_worker_calls_no_webhook_for_a_dispatch_queued_without_the_servers_key(live) -> None:
    from notifications.models import Delivery, Preference, Webhook
    from portal.celery import app
    from scheduler.models import JobEvent
    from tests.e2e.conftest import wait_until
    from tests.notifications.conftest import Receiver
    from tests.support.live_helpers import make_user, submit

    receiver = Receiver()
    try:
        node = live.start_agent("seal", 1)
        live.wait_nodes_up(node)
        owner = make_user("sealy")
        Preference.objects.create(user=owner, webhook_events=["finished"])
        Webhook.objects.create(owner=owner, url=receiver.url, allow_private=True)
        job = submit(owner, "sealed", command="echo hello", num_gpus=1)
        wait_until(lambda: len(receiver.requests) == 1, "the job's one webhook call")
        event_ids = list(JobEvent.objects.filter(job=job).values_list("pk", flat=True))

        # What a node's Redis user may do: append a message to the report queue, here naming the
        # server's dispatch task with every event of the job, sent by a process without the seal.
        forged_id, bogus_id = uuid.uuid4().hex, uuid.uuid4().hex
        before_task_publish.disconnect(seal_outgoing)
        try:
            app.send_task("notifications.dispatch", args=[event_ids], task_id=forged_id, queue=protocol.REPORT_QUEUE)
            app.send_task("notifications.dispatch", args=[event_ids], task_id=bogus_id, queue=protocol.REPORT_QUEUE,
                          headers={HEADER: "0" * 64})
        finally:
            before_task_publish.connect(seal_outgoing)
        wait_until(lambda: f"({forged_id}) not run: it carries no seal" in live.worker.output()
                   and f"({bogus_id}) not run: its seal does not verify" in live.worker.output(),
                   "the worker to refuse both messages")
        assert Delivery.objects.filter(job=job).count() == 1 and len(receiver.requests) == 1

        # The same message sealed by this process (which holds the stack's SECRET_KEY) is run.
        app.send_task("notifications.dispatch", args=[event_ids], queue=protocol.REPORT_QUEUE)
        wait_until(lambda: len(receiver.requests) == 2, "the sealed dispatch's webhook call")
        assert Delivery.objects.filter(job=job).count() == 2
    finally:
        receiver.server.shutdown()
        receiver.server.server_close()


def test_during_an_upgrade_unsealed_tasks_may_run_but_a_wrong_seal_never(monkeypatch, settings, caplog) -> None:
    from notifications import tasks
    from portal.celery import app

    settings.GPUSCHED_RUN_UNSEALED_TASKS = True
    calls: list[list[int]] = []
    monkeypatch.setattr(tasks.services, "dispatch", lambda ids: calls.append(list(ids)) or [])
    monkeypatch.setattr(task_seal, "_last_audit", {"notifications.dispatch": float("inf")})
    task = app.tasks["notifications.dispatch"]
    old_release = {"id": "u1", "args": [[5]], "kwargs": {}, "called_directly": False, "is_eager": False}
    with caplog.at_level(logging.WARNING, logger="cluster.task_seal"):
        _run(task, old_release, [5])
        _run(task, dict(old_release, id="u2", **{HEADER: "0" * 64}), [5])
    assert calls == [[5]]
    assert "task notifications.dispatch (u1) carries no seal; run because GPUSCHED_RUN_UNSEALED_TASKS" in caplog.text
    assert "task notifications.dispatch (u2) not run: its seal does not verify" in caplog.text
