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



@pytest.fixture
def rotating(production, settings, redis_url):  # noqa: ANN001, ANN201
    """A rotation: AGENT_SECRET is the new secret, the old one a fallback; the secrets in use in Redis."""
    from cluster import agent_secret_in_use

    production.AGENT_SECRET, production.AGENT_SECRET_FALLBACKS = "new-secret", ["old-secret"]
    settings.REDIS_URL = redis_url
    agent_secret_in_use.forget_cache()
    import redis

    redis.Redis.from_url(redis_url).delete(agent_secret_in_use.KEY)
    yield production
    agent_secret_in_use.forget_cache()


@pytest.mark.redis
def test_during_a_rotation_reports_under_either_secret_pass_and_commands_follow_the_agent(rotating) -> None:  # noqa: ANN001
    old, new = auth.node_token("old-secret", "n1"), auth.node_token("new-secret", "n1")
    assert auth.signing_token("n1") == old  # nothing heard yet: every report so far was signed under the old
    auth.check_report("n1", "cluster.heartbeat", message_signing.signed(new, "cluster.heartbeat", HEARTBEAT, 1.0))
    assert auth.signing_token("n1") == new  # its agent has its new token: so do its commands
    assert auth.signing_token("n2") == auth.node_token("old-secret", "n2")
    auth.check_report("n1", "cluster.heartbeat", message_signing.signed(old, "cluster.heartbeat", HEARTBEAT, 2.0))
    assert auth.signing_token("n1") == old
    auth.check_report("n1", "cluster.heartbeat", message_signing.signed(new, "cluster.heartbeat", HEARTBEAT, 2.5))
    assert auth.signing_token("n1") == new
    auth.check_report("n1", "cluster.heartbeat", {**HEARTBEAT, "token": old})  # an agent older than signing
    assert auth.signing_token("n1") == old
    with pytest.raises(auth.AgentAuthError, match="does not verify"):
        auth.check_report("n1", "cluster.heartbeat", message_signing.signed(
            auth.node_token("another-secret", "n1"), "cluster.heartbeat", HEARTBEAT, 3.0))


def test_once_the_fallbacks_are_emptied_old_tokens_are_refused(production) -> None:  # noqa: ANN001
    production.AGENT_SECRET, production.AGENT_SECRET_FALLBACKS = "new-secret", []
    old = auth.node_token("old-secret", "n1")
    with pytest.raises(auth.AgentAuthError, match="does not verify"):
        auth.check_report("n1", "cluster.heartbeat", message_signing.signed(old, "cluster.heartbeat", HEARTBEAT, 1.0))
    assert not auth.token_matches("n1", old)
    assert auth.signing_token("n1") == auth.node_token("new-secret", "n1")


def test_a_fallback_equal_to_the_secret_or_empty_is_no_rotation(production) -> None:  # noqa: ANN001
    production.AGENT_SECRET, production.AGENT_SECRET_FALLBACKS = "s", ["s", ""]
    assert auth.accepted_secrets() == ["s"]
