"""Agent registration on the database: the node and its GPU rows, resizing, a lost node back."""

from __future__ import annotations


import pytest
from django.utils import timezone

from cluster import protocol, registration
from cluster.models import Gpu, Node, NodeState
from tests.support.live_helpers import make_node
from tests.support.placed_jobs import owner, placed_job  # noqa: F401 - owner is a fixture

pytestmark = pytest.mark.django_db


def test_register_creates_the_node_and_its_gpus_and_reconciles(sent, no_triggers, django_capture_on_commit_callbacks) -> None:
    now = timezone.now()
    with django_capture_on_commit_callbacks(execute=True):
        registration.register_node("n1", gpus=2, cpus=8, mem_gb=32, gpu_models=["A100", "A100"], agent_version="1.0", now=now)
    node = Node.objects.get(name="n1")
    assert (node.state, node.gpus, node.cpus, node.mem_gb, node.agent_version) == (NodeState.UP, 2, 8, 32, "1.0")
    assert list(node.devices.values_list("index", "model_name")) == [(0, "A100"), (1, "A100")]
    assert sent.of(protocol.AGENT_RECONCILE) == [("n1", {"keep": []})]
    assert no_triggers == ["cycle"]


def test_re_register_resizes_keeps_held_gpus_and_keeps_current_attempts(owner, sent, no_triggers,
                                                                        django_capture_on_commit_callbacks) -> None:
    make_node("n1", 4)
    job = placed_job(owner, {"n1": [3]})
    with django_capture_on_commit_callbacks(execute=True):
        registration.register_node("n1", gpus=2, cpus=0, mem_gb=0, gpu_models=[], agent_version="", now=timezone.now())
    assert sorted(Gpu.objects.filter(node__name="n1").values_list("index", flat=True)) == [0, 1, 3]  # 3 is held
    assert sent.of(protocol.AGENT_RECONCILE) == [("n1", {"keep": [[job.pk, 1]]})]


def test_a_lost_node_that_registers_again_is_up(sent, no_triggers, django_capture_on_commit_callbacks) -> None:
    make_node("n1", 1, state=NodeState.NODE_LOST)
    with django_capture_on_commit_callbacks(execute=True):
        registration.register_node("n1", gpus=1, cpus=0, mem_gb=0, gpu_models=[], agent_version="", now=timezone.now())
    assert Node.objects.get(name="n1").state == NodeState.UP


def test_a_node_registering_is_sent_again_the_launches_still_starting_on_it(owner, sent, no_triggers,
                                                                             django_capture_on_commit_callbacks) -> None:
    """Its agent may have lost them with its previous run, or refused them (signed with the token it had
    before a rotation of the agent secret): they are sent at once, not after the node-lost delay."""
    from scheduler.models import JobState

    make_node("n1", 2)
    make_node("n2", 1)
    starting = placed_job(owner, {"n1": [0], "n2": [0]}, state=JobState.STARTING, started_ago=1.0)
    placed_job(owner, {"n1": [1]})  # running: its agent has it
    with django_capture_on_commit_callbacks(execute=True):
        registration.register_node("n1", gpus=2, cpus=0, mem_gb=0, gpu_models=[], agent_version="", now=timezone.now())
    assert [(node, kw["job_id"], kw["attempt"], kw["node_rank"]) for node, kw in sent.launches] == [
        ("n1", starting.pk, 1, 0)]
