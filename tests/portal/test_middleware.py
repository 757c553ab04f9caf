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


@pytest.mark.parametrize(("path", "name"), [
    ("/admin/scheduler/job/?state__exact=%00", "state__exact"), ("/admin/cluster/node/?state__exact=%00", "state__exact"),
    ("/admin/scheduler/job/?o=1&q=a%00b", "q"), ("/jobs/?owner=%00", "owner"), ("/admin/auth/user/?%00=1", "\x00"),
])
def test_a_null_in_a_page_s_query_is_a_plain_400_naming_the_parameter(superuser_client, path: str, name: str) -> None:
    response = superuser_client.get(path)
    assert response.status_code == 400
    assert response.content.decode() == f"Null characters are not allowed in the query string (parameter {name!r})."


def test_a_null_in_an_api_query_is_a_400_in_the_api_s_field_errors(roles, api_as) -> None:  # noqa: ANN001
    response = api_as(roles.staff).get("/api/v1/jobs/?state=PENDING&owner=b%00b")
    assert response.status_code == 400
    assert response.json() == {"errors": {"owner": ["Null characters are not allowed."]}}


@pytest.mark.parametrize("query", ["state__exact=%2500", "q=100%25", "q=a%2B00"])
def test_a_query_that_only_looks_like_one_goes_on(superuser_client, query: str) -> None:
    assert superuser_client.get(f"/admin/scheduler/job/?{query}").status_code in (200, 302)
