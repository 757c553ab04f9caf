"""The server side of multi-node launches: the address a node registers with, and the ranks,
node list and master every launch of an attempt names (first sent by the apply step, re-sent
by the tick)."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone

from cluster import overdue, protocol, reports, tasks
from cluster.models import Node
from scheduler import apply, snapshot
from scheduler.core.decisions import Start
from scheduler.core.model import Placement
from scheduler.models import Attempt, Job, JobState
from tests.support.live_helpers import make_node, make_user, submit

pytestmark = pytest.mark.django_db

REGISTER = {"node": "n1", "gpus": 2, "cpus": 8.0, "mem_gb": 16, "gpu_models": [], "token": "", "agent_version": "0.1"}


def test_register_stores_the_advertised_address_and_a_missing_one_is_the_name(sent, no_triggers) -> None:
    tasks.register(**REGISTER, address="10.0.3.7")
    assert Node.objects.get(name="n1").address == "10.0.3.7"
    tasks.register(**{**REGISTER, "node": "n2"})  # an agent older than the field
    assert Node.objects.get(name="n2").address == "n2"
    tasks.register(**REGISTER, address="gpu1.example.org")  # a re-registration updates it
    assert Node.objects.get(name="n1").address == "gpu1.example.org"


@pytest.mark.parametrize("address", ["10.0.0.1 && reboot", "a,b", 17])
def test_a_bad_address_is_refused_naming_the_field_and_nothing_is_written(sent, no_triggers, caplog,
                                                                          address) -> None:
    with caplog.at_level(logging.ERROR, logger="cluster.tasks"):
        assert tasks.register(**REGISTER, address=address) is None
    assert "address:" in caplog.text
    assert not Node.objects.exists() and sent.items == []


def _nodes(*specs: tuple[str, int, str]) -> None:
    for name, gpus, address in specs:
        make_node(name, gpus)
        Node.objects.filter(name=name).update(address=address)


def test_a_start_across_nodes_sends_each_node_its_rank_the_sorted_node_list_and_rank_0s_address(
        sent, django_capture_on_commit_callbacks) -> None:
    _nodes(("zeta", 2, "10.0.0.26"), ("alpha", 1, "10.0.0.1"), ("mid", 4, ""))
    job = submit(make_user("alice"), "wide", num_gpus=5)
    cycle = snapshot.build(timezone.now())
    # The policy lists the nodes in its own order; the ranks follow the names.
    start = Start(str(job.pk), Placement.of({"zeta": 2, "mid": 2, "alpha": 1}))
    with django_capture_on_commit_callbacks(execute=True), transaction.atomic():
        assert apply.apply_decisions([start], cycle).started == [job.pk]

    port = protocol.master_port(job.pk, 1, first_gpu=0)  # rank 0's node, alpha, gives GPU 0
    by_node = {node: kw for node, kw in sent.launches}
    assert set(by_node) == {"alpha", "mid", "zeta"}
    for rank, node in enumerate(["alpha", "mid", "zeta"]):
        kw = by_node[node]
        assert (kw["nodes"], kw["node_rank"], kw["master_addr"], kw["master_port"]) == (
            ["alpha", "mid", "zeta"], rank, "10.0.0.1", port)
    assert by_node["zeta"]["gpu_indices"] == [0, 1] and by_node["alpha"]["gpu_indices"] == [0]


def test_a_single_node_start_is_rank_0_of_1_mastered_at_its_own_address(sent, django_capture_on_commit_callbacks) -> None:
    _nodes(("n1", 2, ""))  # registered without an address: its name
    job = submit(make_user("alice"), "one", num_gpus=2)
    cycle = snapshot.build(timezone.now())
    with django_capture_on_commit_callbacks(execute=True), transaction.atomic():
        apply.apply_decisions([Start(str(job.pk), Placement.of({"n1": 2}))], cycle)
    ((node, kw),) = sent.launches
    assert (node, kw["nodes"], kw["node_rank"], kw["master_addr"]) == ("n1", ["n1"], 0, "n1")


def test_a_re_sent_launch_names_the_same_ranks_and_master_as_the_first(sent, settings) -> None:
    settings.AGENT_HEARTBEAT_SECONDS, settings.NODE_LOST_HEARTBEATS = 1.0, 2
    _nodes(("b", 1, "10.0.0.2"), ("a", 1, "10.0.0.1"))
    now = timezone.now()
    job = Job.objects.create(owner=make_user("alice"), name="j", command="x", num_gpus=2, state=JobState.STARTING,
                             attempt_count=3, grace_period=5)
    Attempt.objects.create(job=job, number=3, gpu_allocation={"b": [0], "a": [0]}, state="STARTING",
                           started_at=now - timedelta(seconds=5))
    overdue.resend_overdue_commands(now)
    assert sorted((node, kw["nodes"], kw["node_rank"], kw["master_addr"], kw["master_port"], kw["resume"])
                  for node, kw in sent.launches) == [
        ("a", ["a", "b"], 0, "10.0.0.1", protocol.master_port(job.pk, 3, first_gpu=0), True),
        ("b", ["a", "b"], 1, "10.0.0.1", protocol.master_port(job.pk, 3, first_gpu=0), True),
    ]


def _running_on_two_nodes(sent, capture) -> Job:  # noqa: ANN001
    _nodes(("a", 1, "10.0.0.1"), ("b", 1, "10.0.0.2"))
    job = submit(make_user("alice"), "wide", num_gpus=2)
    cycle = snapshot.build(timezone.now())
    with capture(execute=True), transaction.atomic():
        apply.apply_decisions([Start(str(job.pk), Placement.of({"a": 1, "b": 1}))], cycle)
    for node in ("a", "b"):
        reports.attempt_started(node, job.pk, 1, 4242, timezone.now())
    return job


def _exit(job: Job, node: str, code: int | None, reason: str | None = None) -> str | None:
    now = timezone.now()
    return reports.attempt_exited(node, job.pk, 1, exit_code=code, signal=None, ended_at=now, notice_at=None,
                                   checkpointed=False, reason=reason, now=now)


def test_a_rank_exiting_0_completes_the_job_only_when_every_rank_does(
        sent, no_triggers, django_capture_on_commit_callbacks) -> None:
    job = _running_on_two_nodes(sent, django_capture_on_commit_callbacks)
    assert _exit(job, "a", 0) == "COMPLETED"
    job.refresh_from_db()
    assert job.state == JobState.RUNNING  # rank 1 still runs
    assert _exit(job, "b", 0) == "COMPLETED"
    job.refresh_from_db()
    assert job.state == JobState.COMPLETED


def test_a_rank_failing_after_another_exited_0_fails_the_job(
        sent, no_triggers, django_capture_on_commit_callbacks) -> None:
    job = _running_on_two_nodes(sent, django_capture_on_commit_callbacks)
    assert _exit(job, "a", 0) == "COMPLETED"
    assert _exit(job, "b", 1) == "FAILED"
    job.refresh_from_db()
    attempt = Attempt.objects.get(job=job, number=1)
    assert (job.state, attempt.state, attempt.exit_code) == (JobState.FAILED, "FAILED", 1)


def test_the_first_failure_decides_over_later_reports(
        sent, no_triggers, django_capture_on_commit_callbacks) -> None:
    job = _running_on_two_nodes(sent, django_capture_on_commit_callbacks)
    sent.clear()
    with django_capture_on_commit_callbacks(execute=True):
        assert _exit(job, "a", 3) == "FAILED"
    assert [(node, kind) for node, kind, _ in sent.items] == [("b", protocol.AGENT_KILL)]  # the other rank is stopped
    assert _exit(job, "b", None, reason=protocol.EXIT_STALE) == "FAILED"
    job.refresh_from_db()
    attempt = Attempt.objects.get(job=job, number=1)
    assert (job.state, attempt.exit_code) == (JobState.FAILED, 3)


def test_every_command_is_signed_with_its_nodes_token_which_it_does_not_carry(settings, monkeypatch) -> None:  # noqa: ANN001
    from cluster import auth, commands, message_signing
    from cluster.broker import app

    published: list[tuple[str, dict, str]] = []
    monkeypatch.setattr(app, "send_task", lambda task, kwargs, queue, **_: published.append((task, kwargs, queue)))
    settings.GPUSCHED_AGENT_DEV_MODE = False
    settings.AGENT_SECRET = "s3cret"
    assert commands.send("n1", protocol.AGENT_KILL, {"job_id": 7, "attempt": 1, "reason": "cancel"})
    (task, kwargs, queue), = published
    n1 = auth.node_token("s3cret", "n1")
    assert queue == protocol.node_queue("n1") and n1 not in repr(kwargs) and "token" not in kwargs
    assert message_signing.verifies(n1, task, kwargs)
    assert not message_signing.verifies(auth.node_token("s3cret", "n2"), task, kwargs)

    settings.AGENT_SECRET = ""  # no secret outside development mode: no token to sign with, agents refuse it
    commands.send("n1", protocol.AGENT_KILL, {"job_id": 7, "attempt": 1, "reason": "cancel"})
    assert "signature" not in published[-1][1]
