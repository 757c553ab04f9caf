"""API tokens for scripts and the CLI.

Several named tokens per user. Only the SHA-256 of a key is stored; the key is
shown once, when it is created. A revoked token never authenticates again.
"""

from __future__ import annotations

import hashlib
import secrets

from django.conf import settings
from django.db import models
from django.utils import timezone

KEY_PREFIX_LENGTH = 8


def hash_key(key: str) -> str:
    """The stored form of a key. Keys are random and long, so a plain digest suffices."""
    return hashlib.sha256(key.encode()).hexdigest()


class ApiToken(models.Model):
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100)
    key_hash = models.CharField(max_length=64, unique=True)
    prefix = models.CharField(max_length=KEY_PREFIX_LENGTH, help_text="First characters, to recognise a key.")
    created = models.DateTimeField(default=timezone.now)
    last_used = models.DateTimeField(null=True, blank=True)
    revoked = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created", "-id"]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…) of {self.user}"

    @property
    def is_active(self) -> bool:
        return self.revoked is None

    @classmethod
    def issue(cls, user, name: str) -> tuple["ApiToken", str]:  # noqa: ANN001 - a user model instance
        """Create a token; return it and its key (the only time the key is available)."""
        key = secrets.token_urlsafe(32)
        token = cls.objects.create(user=user, name=name, key_hash=hash_key(key), prefix=key[:KEY_PREFIX_LENGTH])
        return token, key
