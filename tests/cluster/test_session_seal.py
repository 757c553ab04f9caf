"""A session's secret sealed to the server's key: only that server opens it, only for that node, job and attempt."""

from __future__ import annotations

import base64

import pytest
from hypothesis import given, settings, strategies as st

from cluster import session_seal

SERVER_KEY = "the server's SECRET_KEY"
SECRET = "s3cr3t-" + "x" * 36
CTX = session_seal.context("n1", 7, 1)


def sealed() -> str:
    return session_seal.seal_to(session_seal.public_key_text(SERVER_KEY), SECRET, CTX)


def test_the_server_opens_what_the_node_sealed_and_the_sealed_text_holds_no_part_of_the_secret() -> None:
    text = sealed()
    assert session_seal.open_sealed([SERVER_KEY], text, CTX) == SECRET
    assert "x" * 8 not in text and "s3cr3t" not in text
    assert text != sealed()  # a fresh ephemeral key and nonce each time


@pytest.mark.parametrize("ctx", [session_seal.context("n2", 7, 1), session_seal.context("n1", 8, 1),
                                 session_seal.context("n1", 7, 2), b""])
def test_a_sealed_secret_does_not_open_for_another_node_job_or_attempt(ctx: bytes) -> None:
    assert session_seal.open_sealed([SERVER_KEY], sealed(), ctx) is None


def test_only_the_key_it_was_sealed_to_opens_it_and_an_old_key_kept_as_a_fallback_still_does() -> None:
    text = sealed()
    assert session_seal.open_sealed(["another server"], text, CTX) is None
    assert session_seal.open_sealed(["the new key", SERVER_KEY], text, CTX) == SECRET
    assert session_seal.public_key_text("the new key") != session_seal.public_key_text(SERVER_KEY)


def test_the_public_key_is_32_bytes_of_url_safe_base64_and_only_such_a_key_is_accepted() -> None:
    key = session_seal.public_key_text(SERVER_KEY)
    assert session_seal.check_public_key(key) is not None
    for bad in ("", "not base64!", base64.urlsafe_b64encode(b"short").decode(), key + "AAAA", 5):
        assert session_seal.check_public_key(bad) is None  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        session_seal.seal_to("not a key", SECRET, CTX)


def _flip(text: str, at: int) -> str:
    raw = bytearray(base64.urlsafe_b64decode(text[len(session_seal.PREFIX):]))
    raw[at % len(raw)] ^= 1
    return session_seal.PREFIX + base64.urlsafe_b64encode(bytes(raw)).decode()


@settings(max_examples=60, deadline=None)
@given(at=st.integers(min_value=0, max_value=10_000))
def test_any_altered_byte_is_refused(at: int) -> None:
    assert session_seal.open_sealed([SERVER_KEY], _flip(sealed(), at), CTX) is None


@pytest.mark.parametrize("hostile", [None, 17, "", "x1:", "x1:!!!!", "v1:" + "A" * 80, "x1:" + "A" * 20,
                                     "x1:" + "A" * 120, SECRET])
def test_malformed_values_are_refused_without_an_exception(hostile: object) -> None:
    assert session_seal.open_sealed([SERVER_KEY], hostile, CTX) is None
