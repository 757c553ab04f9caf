"""Protocol versions: what a message's version is, which ones a receiver accepts, and how the server
treats agents of the previous, a too old and a too new version (accepted and shown, or refused with a
log line and a refusal sent to the agent; never misread)."""

from __future__ import annotations

import logging

import pytest

from cluster import protocol, protocol_versions, tasks
from cluster.models import Node
from cluster.protocol import PROTOCOL_VERSION, ProtocolError
from cluster.protocol_versions import (ENV_PROTOCOL_VERSION, PROTOCOL_FIELD, UnsupportedVersion, check_version,
                                       message_version, spoken_version)

REGISTER = {"node": "n1", "gpus": 2, "cpus": 8.0, "mem_gb": 16, "gpu_models": ["Virtual GPU"], "token": "",
            "agent_version": "0.1"}


def test_a_message_without_a_version_is_version_1_and_a_malformed_one_names_the_field() -> None:
    assert message_version({}) == 1
    assert message_version({PROTOCOL_FIELD: 7}) == 7
    for bad in ("2", 2.0, True, -1, None):
        with pytest.raises(ProtocolError) as caught:
            message_version({PROTOCOL_FIELD: bad})
        assert caught.value.field == PROTOCOL_FIELD


def test_a_receiver_accepts_its_own_and_the_previous_version_only() -> None:
    check_version(PROTOCOL_VERSION, PROTOCOL_VERSION, "x")
    check_version(PROTOCOL_VERSION - 1, PROTOCOL_VERSION, "x")
    with pytest.raises(UnsupportedVersion, match=r"node a speaks protocol version 4, too new for this side, which "
                                                 r"speaks 2 and accepts 1 and 2"):
        check_version(4, 2, "node a")
    with pytest.raises(UnsupportedVersion, match="version 1, too old"):
        check_version(1, 3, "node a")


def test_the_spoken_version_can_be_overridden_for_compatibility_tests_only_by_a_number() -> None:
    assert spoken_version({}) == PROTOCOL_VERSION
    assert spoken_version({ENV_PROTOCOL_VERSION: "3"}) == 3
    with pytest.raises(ValueError, match=ENV_PROTOCOL_VERSION):
        spoken_version({ENV_PROTOCOL_VERSION: "three"})


@pytest.mark.django_db
def test_the_server_keeps_the_version_of_each_agent_and_calls_the_previous_one_old(
        sent, no_triggers, roles, api_as) -> None:
    tasks.register(**REGISTER)  # an agent from before versions: 1, the previous version
    tasks.register(**{**REGISTER, "node": "n2", PROTOCOL_FIELD: PROTOCOL_VERSION})
    assert dict(Node.objects.values_list("name", "protocol_version")) == {"n1": 1, "n2": PROTOCOL_VERSION}
    nodes = {n["name"]: n for n in api_as(roles.owner).get("/api/v1/nodes/").json()}
    assert (nodes["n1"]["protocol_version"], nodes["n1"]["agent_outdated"]) == (1, True)
    assert (nodes["n2"]["protocol_version"], nodes["n2"]["agent_outdated"]) == (PROTOCOL_VERSION, False)


@pytest.mark.django_db
def test_every_command_carries_the_server_s_version_and_cluster(monkeypatch) -> None:
    from cluster import commands, server_identity
    from cluster.broker import app

    published = []
    monkeypatch.setattr(app, "send_task", lambda task, kwargs, **_: published.append((task, kwargs)))
    commands.send("n1", protocol.AGENT_KILL, {"job_id": 1, "attempt": 1, "grace_period": 0.0, "reason": "cancel"})
    assert published == [(protocol.AGENT_KILL, {"job_id": 1, "attempt": 1, "grace_period": 0.0, "reason": "cancel",
                                                PROTOCOL_FIELD: PROTOCOL_VERSION,
                                                server_identity.FIELD: server_identity.cluster_id()})]


@pytest.mark.django_db
@pytest.mark.parametrize("version", [PROTOCOL_VERSION + 1, PROTOCOL_VERSION - 2])
def test_the_server_refuses_an_agent_too_new_or_too_old_with_a_log_line_and_tells_it(
        version, sent, no_triggers, caplog) -> None:
    with caplog.at_level(logging.ERROR, logger="cluster.tasks"):
        tasks.register(**{**REGISTER, PROTOCOL_FIELD: version})
        tasks.heartbeat(node="n1", running=[], sent_at=0, **{PROTOCOL_FIELD: version})
    assert not Node.objects.exists()
    age = "too new" if version > PROTOCOL_VERSION else "too old"
    assert caplog.text.count(f"from node 'n1' refused: the agent of node n1 speaks protocol version {version}, "
                             f"{age}") == 2
    assert [(node, task) for node, task, _ in sent.items] == [("n1", protocol_versions.AGENT_REFUSED)]
    assert f"protocol version {version}" in sent.items[0][2]["reason"]
