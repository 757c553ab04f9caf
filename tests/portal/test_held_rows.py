"""A request that must change a row another transaction holds is answered 503 within the web
server's limit instead of hanging (portal/held_rows.py, ``DATABASE_LOCK_WAIT_S``), on real
PostgreSQL: the holder is a second session of the test, as a ``psql`` left in ``BEGIN`` or a slow
writer would be. The limit is set on the test's own connection as the web server's options set it
on each of its connections."""

from __future__ import annotations

import time
from collections.abc import Iterator

import psycopg
import pytest
from django.db import OperationalError, connection
from django.test import RequestFactory

from portal.held_rows import RETRY_AFTER_S, HeldRowMiddleware
from scheduler.models import JobState
from tests.support.livestack import _database_url

LIMIT_MS = 300


@pytest.fixture()
def web_lock_wait() -> Iterator[None]:
    """The test's connection gives up on a held row after ``LIMIT_MS``, as the web server's do."""
    with connection.cursor() as cursor:
        cursor.execute(f"SET lock_timeout = '{LIMIT_MS}ms'")
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute("RESET lock_timeout")


@pytest.fixture()
def holder() -> Iterator[psycopg.Connection]:
    """A second session, in a transaction of its own, to lock rows with."""
    conn = psycopg.connect(_database_url())
    try:
        yield conn
    finally:
        conn.close()


def _hold_job(conn: psycopg.Connection, pk: int) -> None:
    conn.execute("SELECT id FROM scheduler_job WHERE id = %s FOR UPDATE", (pk,))


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_cancelling_a_held_job_through_the_api_answers_503_and_changes_nothing(
        roles, api_as, make_job, web_lock_wait, holder) -> None:  # noqa: ANN001
    job = make_job(roles.owner)
    other = make_job(roles.other)
    _hold_job(holder, job.pk)
    started = time.monotonic()
    response = api_as(roles.owner).post(f"/api/v1/jobs/{job.pk}/cancel/")
    waited = time.monotonic() - started

    assert response.status_code == 503
    assert response["Retry-After"] == str(RETRY_AFTER_S)
    assert "held by another transaction" in response.json()["detail"]
    assert waited >= LIMIT_MS / 1000  # it did wait for the row, up to the limit
    job.refresh_from_db()
    assert job.state == JobState.PENDING and not job.events.filter(to_state=JobState.CANCELLED).exists()
    # Another user's request about a row nobody holds is served as usual meanwhile.
    assert api_as(roles.other).post(f"/api/v1/jobs/{other.pk}/cancel/").status_code == 202

    holder.commit()  # the holder is done: the same request goes through
    response = api_as(roles.owner).post(f"/api/v1/jobs/{job.pk}/cancel/")
    assert response.status_code == 202 and response.json()["state"] == JobState.CANCELLED


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_cancelling_a_held_job_from_its_page_answers_a_503_page(
        roles, browser_as, make_job, web_lock_wait, holder) -> None:  # noqa: ANN001
    job = make_job(roles.owner)
    _hold_job(holder, job.pk)
    response = browser_as(roles.owner).post(f"/jobs/{job.pk}/cancel/")

    assert response.status_code == 503 and response["Retry-After"] == str(RETRY_AFTER_S)
    assert response["Content-Type"].startswith("text/html")
    assert b"held by another transaction" in response.content
    job.refresh_from_db()
    assert job.state == JobState.PENDING


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_without_the_limit_the_request_waits_for_the_holder(roles, api_as, make_job, holder) -> None:  # noqa: ANN001
    """What every request did before: it waits as long as the holder keeps the row."""
    import threading

    job = make_job(roles.owner)
    _hold_job(holder, job.pk)
    threading.Timer(1.0, holder.commit).start()
    started = time.monotonic()
    response = api_as(roles.owner).post(f"/api/v1/jobs/{job.pk}/cancel/")
    assert response.status_code == 202 and time.monotonic() - started >= 0.9


def test_other_database_errors_are_left_to_django() -> None:
    middleware = HeldRowMiddleware(lambda request: None)
    request = RequestFactory().post("/api/v1/jobs/1/cancel/")
    assert middleware.process_exception(request, OperationalError("server closed the connection")) is None
    assert middleware.process_exception(request, ValueError("no")) is None
