"""A session's secret sealed on its way from the node to the server, so the broker never holds it.

REPORT_SESSION crosses Redis: the message waits in a queue, lands in Redis's append-only file and
its backups, and any process holding the Redis password can read it (docs/security.md). So the
agent does not send the secret itself but the secret encrypted to the server: each session's
launch carries the server's X25519 public key (``ENV_SESSION_REPORT_KEY``), and the agent sends
``sealed_secret``, made as in HPKE's base mode with X25519, HKDF-SHA256 and AES-256-GCM:

* a fresh ephemeral X25519 key pair per report; the shared secret with the server's key, through
  HKDF-SHA256 (its info binding both public keys), gives a one-time AES-256-GCM key;
* the associated data is the session's ``context`` (node, job id, attempt), so a sealed secret
  copied into another job's report, or another node's, does not open;
* text form: ``x1:`` + URL-safe base64 of ephemeral public key (32 bytes) + nonce (12) +
  ciphertext and tag.

The server's private key is derived (HKDF-SHA256) from Django's ``SECRET_KEY``: nothing to store
or distribute, and a report sealed to the key of a ``SECRET_KEY`` since replaced still opens while
the old one is in ``SECRET_KEY_FALLBACKS``. Only the server opens a sealed secret; the public key
is no secret (a job sees it in its launch).

No Django here: the agent and the server both import this module.
"""

from __future__ import annotations

import base64
import binascii
import os
from collections.abc import Iterable
from functools import lru_cache

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

PREFIX = "x1:"
_KEY_PURPOSE = b"gpusched session report key v1"
_SEAL_PURPOSE = b"gpusched session secret transport v1"
_KEY_BYTES = 32
_NONCE_BYTES = 12
_TAG_BYTES = 16


def context(node: str, job_id: str | int, attempt: int) -> bytes:
    """The associated data of one session's sealed secret: it opens only for this node, job and attempt."""
    return f"{node}\n{job_id}\n{attempt}".encode()


@lru_cache(maxsize=8)
def _private_key(secret_key: str) -> X25519PrivateKey:
    raw = HKDF(algorithm=hashes.SHA256(), length=_KEY_BYTES, salt=None, info=_KEY_PURPOSE).derive(secret_key.encode())
    return X25519PrivateKey.from_private_bytes(raw)


def _raw(public: X25519PublicKey) -> bytes:
    return public.public_bytes(Encoding.Raw, PublicFormat.Raw)


@lru_cache(maxsize=8)
def public_key_text(secret_key: str) -> str:
    """The server's public key under ``secret_key``, as the launch carries it (URL-safe base64)."""
    return base64.urlsafe_b64encode(_raw(_private_key(secret_key).public_key())).decode()


def _b64decode(text: str) -> bytes:
    try:
        return base64.b64decode(text.encode(), altchars=b"-_", validate=True)
    except (ValueError, binascii.Error):
        return b""


def _one_time_key(shared: bytes, ephemeral: bytes, server: bytes) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=_KEY_BYTES, salt=None,
                info=_SEAL_PURPOSE + ephemeral + server).derive(shared)


def check_public_key(text: str) -> bytes | None:
    """The raw key of a launch's ``text``, or None when it is not a URL-safe base64 X25519 public key."""
    raw = _b64decode(text) if isinstance(text, str) else b""
    return raw if len(raw) == _KEY_BYTES else None


def seal_to(public_text: str, plain: str, ctx: bytes) -> str:
    """``plain`` sealed to the server key ``public_text`` for the session ``ctx`` (a new key each call).
    ValueError if ``public_text`` is not a public key."""
    server = check_public_key(public_text)
    if server is None:
        raise ValueError("not an X25519 public key in URL-safe base64")
    ephemeral = X25519PrivateKey.generate()
    ephemeral_raw = _raw(ephemeral.public_key())
    key = _one_time_key(ephemeral.exchange(X25519PublicKey.from_public_bytes(server)), ephemeral_raw, server)
    nonce = os.urandom(_NONCE_BYTES)
    sealed = AESGCM(key).encrypt(nonce, plain.encode(), ctx)
    return PREFIX + base64.urlsafe_b64encode(ephemeral_raw + nonce + sealed).decode()


def open_sealed(secret_keys: Iterable[str], sealed: object, ctx: bytes) -> str | None:
    """The secret ``seal_to`` sealed for ``ctx`` to the key of one of ``secret_keys`` (tried in order),
    or None: malformed, altered, sealed for another session, or to a key none of them gives."""
    if not isinstance(sealed, str) or not sealed.startswith(PREFIX):
        return None
    raw = _b64decode(sealed[len(PREFIX):])
    if len(raw) < _KEY_BYTES + _NONCE_BYTES + _TAG_BYTES:
        return None
    ephemeral_raw, nonce, body = raw[:_KEY_BYTES], raw[_KEY_BYTES:_KEY_BYTES + _NONCE_BYTES], raw[_KEY_BYTES + _NONCE_BYTES:]
    ephemeral = X25519PublicKey.from_public_bytes(ephemeral_raw)
    for secret_key in secret_keys:
        private = _private_key(secret_key)
        try:
            shared = private.exchange(ephemeral)
        except ValueError:  # a low-order point: the all-zero shared secret is refused by the library
            return None
        key = _one_time_key(shared, ephemeral_raw, _raw(private.public_key()))
        try:
            plain = AESGCM(key).decrypt(nonce, body, ctx)
        except InvalidTag:
            continue
        try:
            return plain.decode()
        except UnicodeDecodeError:
            return None
    return None
