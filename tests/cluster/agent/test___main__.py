"""The agent's entry point: what it logs of its options."""

from __future__ import annotations


def test_broker_password_is_not_logged():
    from cluster.agent.__main__ import _redact

    assert _redact("redis://:s3cret@host:6379/0") == "redis://:***@host:6379/0"
    assert _redact("redis://user:pw@host/0") == "redis://user:***@host/0"
    assert _redact("redis://host:6379/0") == "redis://host:6379/0"
