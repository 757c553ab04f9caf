"""Requests no view should see: a null character in the query string is a 400 everywhere, before the
database is asked (PostgreSQL refuses NUL in text, which was a 500)."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User

from tests.support.web import PASSWORD

pytestmark = pytest.mark.django_db


@pytest.fixture()
def superuser_client(client):  # noqa: ANN001, ANN201
    User.objects.create_superuser("root", "root@example.org", PASSWORD)
    client.login(username="root", password=PASSWORD)
    return client


@pytest.mark.parametrize("path", ["/admin/scheduler/job/?state__exact=%00", "/admin/cluster/node/?state__exact=%00",
                                  "/admin/scheduler/job/?q=a%00b", "/jobs/?owner=%00", "/admin/auth/user/?%00=1"])
def test_a_null_in_a_page_s_query_is_a_plain_400(superuser_client, path: str) -> None:
    response = superuser_client.get(path)
    assert (response.status_code, response.content) == (400, b"Null characters are not allowed in the query string.")


def test_a_null_in_an_api_query_is_a_json_400(roles, api_as) -> None:  # noqa: ANN001
    response = api_as(roles.staff).get("/api/v1/jobs/?owner=b%00b")
    assert response.status_code == 400
    assert response.json() == {"detail": "Null characters are not allowed in the query string."}


@pytest.mark.parametrize("query", ["state__exact=%2500", "q=100%25", "q=a%2B00"])
def test_a_query_that_only_looks_like_one_goes_on(superuser_client, query: str) -> None:
    assert superuser_client.get(f"/admin/scheduler/job/?{query}").status_code in (200, 302)
