"""Reports signed with the node's token: the token never travels, the signature covers the task and every field,
and it survives the broker's JSON round trip."""

from __future__ import annotations

import json

from hypothesis import given, settings, strategies as st

from cluster import message_signing

KWARGS = {"node": "n1", "running": ((7, 1),), "gpus": {0: {"util": 0.5}, 10: {"util": 1e-7}}, "name": "é"}


def test_a_signature_survives_the_brokers_json_round_trip_and_only_its_token_verifies_it() -> None:
    sent = message_signing.signed("tok", "cluster.telemetry", {**KWARGS, "token": "tok"}, 3.25)
    assert "token" not in sent and sent["signed_at"] == 3.25
    received = json.loads(json.dumps(sent))
    assert message_signing.verifies("tok", "cluster.telemetry", received)
    assert not message_signing.verifies("tok2", "cluster.telemetry", received)
    assert not message_signing.verifies("tok", "cluster.heartbeat", received)
    assert not message_signing.verifies("", "cluster.telemetry", received)


def test_without_a_token_nothing_is_signed_and_no_token_field_is_sent() -> None:
    assert message_signing.signed("", "cluster.log", {**KWARGS, "token": ""}, 1.0) == KWARGS


def test_values_that_are_not_json_never_verify() -> None:
    assert not message_signing.verifies("tok", "cluster.log", {"signature": "ab", "x": float("nan")})
    assert not message_signing.verifies("tok", "cluster.log", {"signature": "ab", "x": object()})


_json = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
                     | st.text(max_size=8), lambda inner: st.lists(inner, max_size=3)
                     | st.dictionaries(st.text(max_size=4), inner, max_size=3), max_leaves=10)


@settings(max_examples=100, deadline=None)
@given(fields=st.dictionaries(st.text(min_size=1, max_size=6).filter(lambda k: k not in ("signature", "token")), _json,
                              max_size=5),
       key=st.text(min_size=1, max_size=6), value=_json)
def test_any_report_verifies_after_the_round_trip_and_any_changed_field_does_not(fields, key, value) -> None:  # noqa: ANN001
    sent = json.loads(json.dumps(message_signing.signed("tok", "t", fields, 1.0)))
    assert message_signing.verifies("tok", "t", sent)
    if key in ("signature", "token"):
        return
    changed = {**sent, key: value}
    if json.dumps(changed.get(key), sort_keys=True) != json.dumps(sent.get(key), sort_keys=True) or key not in sent:
        assert not message_signing.verifies("tok", "t", changed)
