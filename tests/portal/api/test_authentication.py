"""API tokens: created on a page and shown once, stored hashed, authenticate, revoked for good."""

from __future__ import annotations

import re

import pytest
from rest_framework.test import APIClient

from portal.models import ApiToken, hash_key

pytestmark = pytest.mark.django_db


def create_token(client, name: str = "laptop") -> str:  # noqa: ANN001
    response = client.post("/account/tokens/", {"name": name})
    assert response.status_code == 200
    match = re.search(r'<pre id="new-key">([^<]+)</pre>', response.content.decode())
    assert match, "the new key is shown"
    return match.group(1)


def api(key: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return client


def test_key_is_shown_once_and_stored_only_hashed(roles, browser_as) -> None:
    client = browser_as(roles.owner)
    key = create_token(client)
    token = ApiToken.objects.get(user=roles.owner)
    assert token.name == "laptop" and token.key_hash == hash_key(key) and key not in token.key_hash
    assert token.prefix == key[:8]
    listing = client.get("/account/tokens/").content.decode()
    assert key not in listing and token.prefix in listing and "laptop" in listing


def test_key_authenticates_the_api_and_records_use(roles, browser_as) -> None:
    key = create_token(browser_as(roles.owner))
    response = api(key).get("/api/v1/quota/")
    assert response.status_code == 200
    assert ApiToken.objects.get().last_used is not None
    created = api(key).post("/api/v1/jobs/", {"name": "x", "command": "y"}, format="json")
    assert created.status_code == 201 and created.json()["owner"] == "alice"


def test_several_named_tokens_and_revoking_one(roles, browser_as) -> None:
    client = browser_as(roles.owner)
    laptop, ci = create_token(client, "laptop"), create_token(client, "ci")
    ci_token = ApiToken.objects.get(name="ci")
    response = client.post(f"/account/tokens/{ci_token.pk}/revoke/")
    assert response.status_code == 302
    assert api(ci).get("/api/v1/jobs/").status_code == 401
    assert api(laptop).get("/api/v1/jobs/").status_code == 200
    assert "revoked" in client.get("/account/tokens/").content.decode()
    # revoking twice is harmless and keeps the first revocation time
    first = ApiToken.objects.get(pk=ci_token.pk).revoked
    client.post(f"/account/tokens/{ci_token.pk}/revoke/")
    assert ApiToken.objects.get(pk=ci_token.pk).revoked == first


def test_another_users_token_cannot_be_revoked(roles, browser_as) -> None:
    key = create_token(browser_as(roles.owner))
    token = ApiToken.objects.get()
    assert browser_as(roles.other).post(f"/account/tokens/{token.pk}/revoke/").status_code == 404
    assert api(key).get("/api/v1/jobs/").status_code == 200


@pytest.mark.parametrize("header", ["Token", "Token a b", "Token not-a-real-key", "Bearer abc"])
def test_bad_credentials_are_refused(roles, header) -> None:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=header)
    response = client.get("/api/v1/jobs/")
    assert response.status_code == 401
    assert "detail" in response.json()
    if header.startswith("Token"):
        assert response["WWW-Authenticate"] == "Token"


def test_inactive_users_token_is_refused(roles, browser_as) -> None:
    key = create_token(browser_as(roles.owner))
    roles.owner.is_active = False
    roles.owner.save()
    assert api(key).get("/api/v1/jobs/").status_code == 401


def test_token_name_is_required(roles, browser_as) -> None:
    response = browser_as(roles.owner).post("/account/tokens/", {"name": ""})
    assert response.status_code == 400 and response.context["form"].errors["name"]
    assert not ApiToken.objects.exists()


def test_the_token_brings_the_users_posix_identity_along(roles) -> None:
    from django.test import RequestFactory

    from portal.api.authentication import ApiTokenAuthentication
    from scheduler.identity import PosixIdentity

    PosixIdentity.objects.create(user=roles.owner, posix_name="owner7")
    _, key = ApiToken.issue(roles.owner, "laptop")
    request = RequestFactory().get("/api/v1/jobs/", HTTP_AUTHORIZATION=f"Token {key}")
    user, _ = ApiTokenAuthentication().authenticate(request)
    assert type(user).posix_identity.is_cached(user) and user.posix_identity.posix_name == "owner7"
