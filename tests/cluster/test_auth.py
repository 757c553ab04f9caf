"""Agent credentials (cluster.auth): per-node tokens in production; the shared token (or none) only in
development mode; without a secret outside development mode every report is refused, naming why."""

from __future__ import annotations

import pytest

from cluster import auth, message_signing


@pytest.fixture
def production(settings):  # noqa: ANN001, ANN201
    settings.GPUSCHED_AGENT_DEV_MODE = False
    settings.AGENT_TOKEN = "shared"
    settings.AGENT_SECRET = ""
    return settings


def test_without_a_secret_production_refuses_the_shared_token_and_no_token(production) -> None:  # noqa: ANN001
    for token in ("shared", "", None, "anything"):
        assert not auth.token_matches("n1", token)
    with pytest.raises(auth.AgentAuthError, match="no GPUSCHED_AGENT_SECRET is set"):
        auth.check_report("n1", "cluster.heartbeat", {"node": "n1", "token": "shared"})


def test_with_a_secret_only_the_nodes_own_token_passes(production) -> None:  # noqa: ANN001
    production.AGENT_SECRET = "s3cret"
    own = auth.node_token("s3cret", "n1")
    assert auth.token_matches("n1", own)
    assert not auth.token_matches("n2", own)
    assert not auth.token_matches("n1", "shared")
    with pytest.raises(auth.AgentAuthError, match="wrong or missing agent token"):
        auth.check_report("n1", "cluster.heartbeat", {"node": "n1", "token": "shared"})
    auth.check_report("n1", "cluster.heartbeat", {"node": "n1", "token": own})  # an agent older than signing


HEARTBEAT = {"node": "n1", "running": [[7, 1]], "sent_at": 1.5, "protocol_version": 2}


def test_a_report_signed_with_the_nodes_own_token_passes_and_carries_no_token(production) -> None:  # noqa: ANN001
    production.AGENT_SECRET = "s3cret"
    own = auth.node_token("s3cret", "n1")
    sent = message_signing.signed(own, "cluster.heartbeat", {**HEARTBEAT, "token": own}, 100.0)
    assert "token" not in sent and own not in repr(sent) and sent["signed_at"] == 100.0
    auth.check_report("n1", "cluster.heartbeat", sent)


@pytest.mark.parametrize("forged", [
    lambda s, own: message_signing.signed(auth.node_token("s3cret", "n2"), "cluster.heartbeat", s, 1.0),  # n2's token
    lambda s, own: message_signing.signed(own, "cluster.exited", s, 1.0),  # signed for another report
    lambda s, own: {**message_signing.signed(own, "cluster.heartbeat", s, 1.0), "running": []},  # altered
    lambda s, own: {**message_signing.signed(own, "cluster.heartbeat", s, 1.0), "signed_at": 2.0},
    lambda s, own: {**message_signing.signed(own, "cluster.heartbeat", s, 1.0), "extra": "added"},
    lambda s, own: {**s, "signature": "0" * 64},
    lambda s, own: {**s, "signature": None, "token": own},  # a signature field always wins over a token
    lambda s, own: {**s, "signature": ["not", "hex"]},
])
def test_a_forged_moved_or_altered_signature_is_refused(production, forged) -> None:  # noqa: ANN001
    production.AGENT_SECRET = "s3cret"
    own = auth.node_token("s3cret", "n1")
    with pytest.raises(auth.AgentAuthError, match="signature does not verify"):
        auth.check_report("n1", "cluster.heartbeat", forged(dict(HEARTBEAT), own))

