"""Token authentication against ``portal.ApiToken`` (several named, revocable tokens per user)."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions

from portal.models import ApiToken, hash_key

# last_used is written at most this often per token, to keep reads read-only.
LAST_USED_RESOLUTION = timedelta(minutes=1)


class ApiTokenAuthentication(authentication.BaseAuthentication):
    """``Authorization: Token <key>``; revoked tokens and inactive users are refused."""

    keyword = "Token"

    def authenticate(self, request):  # noqa: ANN001, ANN201 - DRF's signature
        header = authentication.get_authorization_header(request).split()
        if not header or header[0].lower() != self.keyword.lower().encode():
            return None
        if len(header) != 2:
            raise exceptions.AuthenticationFailed("Invalid token header: use 'Token <key>'.")
        try:
            key = header[1].decode()
        except UnicodeError:
            raise exceptions.AuthenticationFailed("Invalid token header: the key is not text.") from None
        # The user's POSIX identity comes along: a submission needs it (``scheduler.identity``). ``get``
        # (the hash is unique), not ``first``, whose ORDER BY is work for nothing on every request.
        try:
            token = ApiToken.objects.select_related("user", "user__posix_identity").get(
                key_hash=hash_key(key), revoked__isnull=True)
        except ApiToken.DoesNotExist:
            token = None
        if token is None or not token.user.is_active:
            raise exceptions.AuthenticationFailed("Invalid or revoked token.")
        now = timezone.now()
        if token.last_used is None or now - token.last_used > LAST_USED_RESOLUTION:
            ApiToken.objects.filter(pk=token.pk).update(last_used=now)
        return token.user, token

    def authenticate_header(self, request) -> str:  # noqa: ANN001
        return self.keyword


class ApiTokenScheme(OpenApiAuthenticationExtension):
    """Describe the token scheme in the OpenAPI schema."""

    target_class = ApiTokenAuthentication
    name = "tokenAuth"

    def get_security_definition(self, auto_schema):  # noqa: ANN001, ANN201
        return {
            "type": "apiKey",
            "in": "header",
            "name": "Authorization",
            "description": "Token-based authentication: `Token <key>`; create keys on /account/tokens/.",
        }
