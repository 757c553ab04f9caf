"""Which agent secret a node's agent signs with, kept in Redis during a rotation: noted once per change
(and again after RENOTE_SECONDS), read back by whichever process signs commands, never the secret."""

from __future__ import annotations

import pytest
import redis

from cluster import agent_secret_in_use as in_use

pytestmark = pytest.mark.redis


@pytest.fixture
def store(settings, redis_url):  # noqa: ANN001, ANN201
    settings.REDIS_URL = redis_url
    in_use.forget_cache()
    client = redis.Redis.from_url(redis_url)
    client.delete(in_use.KEY)
    yield client
    client.delete(in_use.KEY)
    in_use.forget_cache()


def test_the_noted_secret_is_read_back_and_only_its_fingerprint_is_stored(store) -> None:  # noqa: ANN001
    # Nothing noted: the previous secret, which signed every report before the rotation began.
    assert in_use.secret_of("n1", ["new", "old"]) == "old"
    assert in_use.secret_of("n1", ["only"]) == "only"
    in_use.note("n1", "new")
    assert in_use.secret_of("n1", ["new", "old"]) == "new"
    assert in_use.secret_of("n2", ["new", "old"]) == "old"
    in_use.note("n1", "old")
    assert in_use.secret_of("n1", ["new", "old"]) == "old"
    stored = store.hgetall(in_use.KEY)
    assert stored == {b"n1": in_use.fingerprint("old").encode()} and b"old" not in b"".join(stored.values())


def test_a_secret_no_longer_accepted_falls_back_to_the_previous_one(store) -> None:  # noqa: ANN001
    in_use.note("n1", "oldest")
    assert in_use.secret_of("n1", ["new", "old"]) == "old"


def test_the_same_note_is_written_once_until_it_is_due_again(store, monkeypatch) -> None:  # noqa: ANN001
    in_use.note("n1", "old")
    store.delete(in_use.KEY)  # a Redis that lost it
    in_use.note("n1", "old")
    assert store.hget(in_use.KEY, "n1") is None  # this process wrote it moments ago
    monkeypatch.setattr(in_use, "RENOTE_SECONDS", 0.0)
    in_use.note("n1", "old")
    assert store.hget(in_use.KEY, "n1") == in_use.fingerprint("old").encode()


def test_without_redis_the_previous_secret_signs_and_noting_does_not_raise(settings, caplog) -> None:  # noqa: ANN001
    from tests.adversarial.stack import free_port

    settings.REDIS_URL = f"redis://127.0.0.1:{free_port()}/0"
    in_use.forget_cache()
    in_use.note("n1", "old")
    assert in_use.secret_of("n1", ["new", "old"]) == "old"
    assert "could not note the agent secret" in caplog.text
