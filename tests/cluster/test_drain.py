"""Draining a node: nothing new starts there, what runs there finishes, and it can return to service."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from cluster import drain, liveness, reports
from cluster.models import Node, NodeState
from scheduler import loop
from scheduler.models import Job, JobState
from tests.support.live_helpers import make_node, make_user, submit

pytestmark = pytest.mark.django_db


def _run(job: Job, node: str) -> None:
    reports.attempt_started(node, job.pk, 1, 4242, timezone.now())


def test_a_draining_node_gets_no_new_job_while_its_running_job_finishes(sent, no_triggers,
                                                                        django_capture_on_commit_callbacks) -> None:
    make_node("n1", 2)
    make_node("n2", 2)
    alice = make_user("alice")
    first = submit(alice, "first", num_gpus=2)
    with django_capture_on_commit_callbacks(execute=True):
        loop.run_cycle()
    first.refresh_from_db()
    node = next(iter(first.attempts.get().gpu_allocation))
    _run(first, node)
    other = "n2" if node == "n1" else "n1"

    state = drain.drain(node)
    assert (state.state, state.busy_gpus, state.jobs, state.drained) == (NodeState.DRAINING, 2, (first.pk,), False)
    sent.clear()
    waiting = [submit(alice, f"w{i}", num_gpus=2) for i in range(2)]
    with django_capture_on_commit_callbacks(execute=True):
        loop.run_cycle()
    assert [n for n, _ in sent.launches] == [other]  # one fits on the other node, none on the draining one
    assert Job.objects.get(pk=waiting[1].pk).state == JobState.PENDING

    liveness.heartbeat(node, [(first.pk, 1)], timezone.now())  # heartbeats keep it DRAINING
    assert Node.objects.get(name=node).state == NodeState.DRAINING
    reports.attempt_exited(node, first.pk, 1, exit_code=0, signal=None, ended_at=timezone.now(), notice_at=None,
                            checkpointed=False, reason=None, now=timezone.now())
    assert Job.objects.get(pk=first.pk).state == JobState.COMPLETED
    assert drain.status(node).drained
    with django_capture_on_commit_callbacks(execute=True):
        loop.run_cycle()
    assert Job.objects.get(pk=waiting[1].pk).state == JobState.PENDING  # still not there

    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        assert drain.undrain(node).state == NodeState.UP
    assert callbacks  # a scheduling cycle is requested on commit
    with django_capture_on_commit_callbacks(execute=True):
        loop.run_cycle()
    assert Job.objects.get(pk=waiting[1].pk).state == JobState.STARTING
    assert list(Job.objects.get(pk=waiting[1].pk).attempts.get().gpu_allocation) == [node]


def test_only_up_nodes_drain_and_only_draining_nodes_return() -> None:
    make_node("lost", 1, state=NodeState.NODE_LOST)
    make_node("up", 1)
    with pytest.raises(drain.DrainError, match="NODE_LOST"):
        drain.drain("lost")
    with pytest.raises(drain.DrainError, match="no node"):
        drain.drain("missing")
    with pytest.raises(drain.DrainError, match="only a DRAINING node"):
        drain.undrain("lost")
    assert drain.drain("up").state == drain.drain("up").state == NodeState.DRAINING  # repeat is harmless
    assert Node.objects.get(name="lost").state == NodeState.NODE_LOST


def test_drain_node_command_waits_and_reports(no_triggers) -> None:
    make_node("n1", 1)
    alice = make_user("alice")
    job = submit(alice, "j")
    loop.run_cycle()
    out = StringIO()
    with pytest.raises(CommandError, match=f"still runs jobs \\[{job.pk}\\]"):
        call_command("drain_node", "n1", "--wait", "0.5", stdout=out)
    assert f"n1: DRAINING, 1 GPU(s) busy (jobs {job.pk})" in out.getvalue()
    call_command("drain_node", "n1", "--undo", stdout=out)
    assert Node.objects.get(name="n1").state == NodeState.UP
    with pytest.raises(CommandError, match="no node"):
        call_command("drain_node", "nope")


def test_admin_actions_drain_and_return_nodes(no_triggers) -> None:
    from django.contrib.auth.models import User
    from django.test import Client

    make_node("n1", 1)
    make_node("n2", 1, state=NodeState.NODE_LOST)
    staff = User.objects.create_user("carol", "c@example.org", "a-long-test-password-42", is_staff=True)
    client = Client()
    client.force_login(staff)
    ids = [str(pk) for pk in Node.objects.order_by("name").values_list("pk", flat=True)]
    response = client.post("/admin/cluster/node/", {"action": "drain_nodes", "index": "0", "_selected_action": ids}, follow=True)
    assert "Node n1 is draining." in response.content.decode()
    assert "Node n2 is NODE_LOST" in response.content.decode()
    assert Node.objects.get(name="n1").state == NodeState.DRAINING
    client.post("/admin/cluster/node/", {"action": "undrain_nodes", "index": "0", "_selected_action": ids[:1]})
    assert Node.objects.get(name="n1").state == NodeState.UP
