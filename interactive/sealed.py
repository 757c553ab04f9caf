"""Session secrets sealed at rest: what the database (and so every backup of it) holds is ciphertext.

The portal must send a session's secret to its server on every request, so it cannot keep a hash;
it keeps the secret encrypted with AES-256-GCM under a key derived (HKDF-SHA256) from Django's
``SECRET_KEY``, with a fresh 96-bit nonce per value. A dump of the database alone opens no session.

Stored form: ``v1:`` + URL-safe base64 of nonce + ciphertext + tag. After a change of ``SECRET_KEY``
the values sealed under the old key still open while it is listed in ``SECRET_KEY_FALLBACKS``
(Django's own rule for rotating it); a value no key opens reads as ``""``, which
``interactive.selectors.target`` treats as a session that cannot be reached (logged once per read).
"""

from __future__ import annotations

import base64
import logging
import os

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings
from django.db import models

log = logging.getLogger(__name__)

PREFIX = "v1:"
_NONCE_BYTES = 12
_PURPOSE = b"gpusched interactive session secret v1"
_keys: dict[str, bytes] = {}  # derived once per SECRET_KEY (HKDF is cheap, but runs on every proxied request)


def _key(secret_key: str) -> bytes:
    key = _keys.get(secret_key)
    if key is None:
        key = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_PURPOSE).derive(secret_key.encode())
        _keys[secret_key] = key
    return key


def seal(plain: str) -> str:
    """``plain`` encrypted under the current ``SECRET_KEY`` (a new nonce each call)."""
    nonce = os.urandom(_NONCE_BYTES)
    sealed = AESGCM(_key(settings.SECRET_KEY)).encrypt(nonce, plain.encode(), None)
    return PREFIX + base64.urlsafe_b64encode(nonce + sealed).decode()


def unseal(stored: str) -> str:
    """The secret in ``stored`` (from ``seal``), opened with ``SECRET_KEY`` or one of its fallbacks;
    ``""`` when none opens it or it is not a sealed value."""
    if not stored.startswith(PREFIX):
        log.error("a stored session secret is not sealed; the session cannot be reached")
        return ""
    try:
        raw = base64.b64decode(stored[len(PREFIX):].encode(), altchars=b"-_", validate=True)
    except ValueError:
        raw = b""
    if len(raw) < _NONCE_BYTES + 16:
        log.error("a stored session secret is malformed; the session cannot be reached")
        return ""
    nonce, sealed = raw[:_NONCE_BYTES], raw[_NONCE_BYTES:]
    for secret_key in (settings.SECRET_KEY, *getattr(settings, "SECRET_KEY_FALLBACKS", ())):
        try:
            return AESGCM(_key(secret_key)).decrypt(nonce, sealed, None).decode()
        except InvalidTag:
            continue
    log.error("a stored session secret opens with neither SECRET_KEY nor SECRET_KEY_FALLBACKS (was the key "
              "changed without keeping the old one as a fallback?); the session cannot be reached")
    return ""


def sealed_length(plain_length: int) -> int:
    """Characters ``seal`` stores for a secret of ``plain_length`` ASCII characters."""
    raw = _NONCE_BYTES + plain_length + 16  # the GCM tag
    return len(PREFIX) + 4 * ((raw + 2) // 3)


class SealedCharField(models.CharField):
    """A text column whose Python value is the secret and whose stored value is ``seal`` of it.

    Sealing is randomised, so the column can be written and read but not looked up by value."""

    def get_prep_value(self, value: object) -> object:
        value = super().get_prep_value(value)
        return seal(value) if isinstance(value, str) and value else value

    def from_db_value(self, value: str | None, expression: object, connection: object) -> str | None:
        return unseal(value) if value else value
