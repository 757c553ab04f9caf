"""Agent credentials (cluster.auth): per-node tokens in production; the shared token (or none) only in
development mode; without a secret outside development mode every report is refused, naming why."""

from __future__ import annotations

import pytest

from cluster import auth


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
        auth.check_token("n1", "shared")


def test_with_a_secret_only_the_nodes_own_token_passes(production) -> None:  # noqa: ANN001
    production.AGENT_SECRET = "s3cret"
    own = auth.node_token("s3cret", "n1")
    assert auth.token_matches("n1", own)
    assert not auth.token_matches("n2", own)
    assert not auth.token_matches("n1", "shared")
    with pytest.raises(auth.AgentAuthError, match="wrong or missing agent token"):
        auth.check_token("n1", "shared")


def test_development_mode_accepts_the_shared_token(production) -> None:  # noqa: ANN001
    production.GPUSCHED_AGENT_DEV_MODE = True
    assert auth.token_matches("n1", "shared") and not auth.token_matches("n1", "other")
    production.AGENT_TOKEN = ""
    assert auth.token_matches("n1", None)  # nothing configured: not checked, development only
