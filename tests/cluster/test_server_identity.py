"""The server's cluster id: one per database, kept by a flush, checked in every report.

A report naming another cluster comes from an agent that remembers another database's jobs (job ids
start again at 1 in a new database): it is ignored, except a registration; a heartbeat is answered
with a request to register again, whose command names this server's cluster."""

from __future__ import annotations

import logging
import time

import pytest
from django.core.management import call_command
from django.db import connection
from django.utils import timezone

from cluster import liveness, protocol, server_identity, tasks
from cluster.models import Node, ServerIdentity
from scheduler.models import Attempt, AttemptState, JobState
from tests.support.live_helpers import make_node
from tests.support.placed_jobs import owner, placed_job  # noqa: F401 - owner is a fixture

FIELD = server_identity.FIELD
REGISTER = {"node": "n1", "gpus": 2, "cpus": 8.0, "mem_gb": 16, "gpu_models": ["Virtual GPU"], "token": "",
            "agent_version": "0.1"}


@pytest.fixture(autouse=True)
def _fresh_id_cache():
    server_identity.forget()
    server_identity._last_logged.clear()
    yield
    server_identity.forget()


@pytest.mark.django_db
def test_the_id_is_the_database_s_one_row_and_stays_the_same() -> None:
    own = server_identity.cluster_id()
    assert len(own) == 36 and list(ServerIdentity.objects.values_list("pk", "uuid")) == [(1, own)]
    server_identity.forget()
    assert server_identity.cluster_id() == own


@pytest.mark.django_db(transaction=True)
def test_a_flush_keeps_the_id() -> None:
    own = server_identity.cluster_id()
    call_command("flush", interactive=False, verbosity=0)
    assert list(ServerIdentity.objects.values_list("uuid", flat=True)) == [own]


@pytest.mark.django_db
def test_a_missing_row_is_made_again() -> None:
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM cluster_server_identity")
    own = server_identity.cluster_id()
    assert ServerIdentity.objects.get(pk=1).uuid == own


@pytest.mark.django_db
def test_which_reports_name_another_cluster() -> None:
    own = server_identity.cluster_id()
    assert server_identity.names_another({}) is None  # an agent not yet told, or of the previous version
    assert server_identity.names_another({FIELD: ""}) is None
    assert server_identity.names_another({FIELD: own}) is None
    assert server_identity.names_another({FIELD: "other"}) == "other"


@pytest.mark.django_db
def test_a_start_naming_another_cluster_does_not_touch_this_database_s_job(owner, sent, caplog) -> None:
    make_node("n1", 1)
    job = placed_job(owner, {"n1": [0]}, state=JobState.STARTING)
    report = {"node": "n1", "job_id": job.pk, "attempt": 1, "pid": 9, "started_at": time.time(), "token": ""}
    with caplog.at_level(logging.WARNING, logger="cluster.server_identity"):
        tasks.started(**report, **{FIELD: "another-database"})
    job.refresh_from_db()
    assert job.state == JobState.STARTING and Attempt.objects.get(job=job).state != AttemptState.RUNNING
    assert "names cluster another-database" in caplog.text
    tasks.started(**report, **{FIELD: server_identity.cluster_id()})
    job.refresh_from_db()
    assert job.state == JobState.RUNNING


@pytest.mark.django_db
def test_an_exit_naming_another_cluster_is_ignored(owner, sent) -> None:
    make_node("n1", 1)
    job = placed_job(owner, {"n1": [0]}, state=JobState.RUNNING)
    tasks.exited(node="n1", job_id=job.pk, attempt=1, exit_code=0, signal=None, ended_at=time.time(), token="",
                 **{FIELD: "another-database"})
    job.refresh_from_db()
    assert job.state == JobState.RUNNING


@pytest.mark.django_db
def test_a_heartbeat_naming_another_cluster_asks_the_agent_to_register_again(owner, sent, monkeypatch) -> None:
    """From the first such heartbeat 2 s after the first: the agent's registration, whose answer
    tells it this cluster, may be in flight."""
    clock = [1000.0]
    monkeypatch.setattr(liveness.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(liveness, "_unknown_since", {})
    monkeypatch.setattr(liveness, "_asked_to_register", {})
    make_node("n1", 1)
    job = placed_job(owner, {"n1": [0]}, state=JobState.RUNNING)
    for _ in range(2):
        tasks.heartbeat(node="n1", running=[], exited=[{"job_id": job.pk, "attempt": 1, "exit_code": 0}],
                        sent_at=time.time(), token="", **{FIELD: "another-database"})
        assert [task for _, task, _ in sent.items] == [protocol.AGENT_REGISTER_AGAIN] * (clock[0] > 1000)
        clock[0] += liveness.REGISTRATION_IN_FLIGHT_S
    job.refresh_from_db()
    assert job.state == JobState.RUNNING


@pytest.mark.django_db
def test_a_registration_is_accepted_whatever_cluster_it_names(sent, no_triggers,
                                                              django_capture_on_commit_callbacks) -> None:
    """The reconcile that answers it is how the agent learns this server's cluster."""
    with django_capture_on_commit_callbacks(execute=True):
        tasks.register(**REGISTER, **{FIELD: "another-database"})
    assert Node.objects.get(name="n1").gpus == 2
    assert protocol.AGENT_RECONCILE in [task for _, task, _ in sent.items]


@pytest.mark.django_db
def test_reports_naming_this_cluster_or_none_are_handled(owner, sent) -> None:
    make_node("n1", 1)
    job = placed_job(owner, {"n1": [0]}, state=JobState.STARTING)
    tasks.started(node="n1", job_id=job.pk, attempt=1, pid=9, started_at=timezone.now().timestamp(), token="")
    job.refresh_from_db()
    assert job.state == JobState.RUNNING


def test_a_command_sent_while_the_database_cannot_be_read_goes_without_the_id(monkeypatch) -> None:
    from django.db import DatabaseError

    from cluster import commands
    from cluster.broker import app

    def unreadable(*_args, **_kwargs):  # noqa: ANN002, ANN003, ANN202
        raise DatabaseError("connection refused")

    monkeypatch.setattr(ServerIdentity.objects, "get_or_create", unreadable)
    published = []
    monkeypatch.setattr(app, "send_task", lambda task, kwargs, **_: published.append(kwargs))
    assert commands.send("n1", protocol.AGENT_RECONCILE, {"keep": []}) is True
    assert FIELD not in published[0] and published[0]["keep"] == []
