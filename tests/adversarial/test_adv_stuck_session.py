"""A database session that stops talking in the middle of a transaction while it holds a job's row
lock: what a portal or worker host cut off from the database leaves behind, or a process frozen
between two statements. PostgreSQL keeps such a lock until it notices the silent peer (TCP
keepalives: two hours by default). The scheduling loop waits for a held row at most
``SCHEDULER_ROW_LOCK_WAIT`` seconds and then passes over it (scheduler/row_locks.py), so every
other job goes on; every process of the system connects with ``DATABASE_IDLE_IN_TRANSACTION_S``
(portal/database.py), so PostgreSQL ends the silent session and the held job starts too. The web
server waits at most ``DATABASE_LOCK_WAIT_S`` for a held row: a request about the held job is
answered 503 (portal/held_rows.py) while every other request is served.

The stuck session here is a connection of the test made with the same option as the system's
processes, kept talking (so that no limit ends it) while the other user's job runs, then silent.
"""

from __future__ import annotations

import threading
import time

import psycopg
import pytest
import requests

from portal.database import idle_in_transaction_option
from portal.models import ApiToken
from scheduler.models import Attempt, AttemptState, Job, JobState
from tests.adversarial.test_adv_faults import SETTINGS, WAIT, start_agents
from tests.support.live_helpers import allocation_problems, make_user, submit
from tests.support.livestack import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.postgres, pytest.mark.redis]

IDLE_LIMIT_S = 2
WEB_LOCK_WAIT_S = 1


def _keep_talking(holder: psycopg.Connection, stop: threading.Event) -> None:
    """A statement every 0.2 s until ``stop``: an idle limit counts from the session's last one."""
    while not stop.is_set():
        holder.execute("SELECT 1")
        stop.wait(0.2)


def _waiting_on(holder: psycopg.Connection) -> list[tuple[int, str]]:
    """(pid, query) of the sessions waiting on ``holder``'s locks."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pid, query FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))",
                       [holder.info.backend_pid])
        return cursor.fetchall()


def _web_requests_about_the_held_job_get_503(live_stack, held: Job, other: Job) -> None:  # noqa: ANN001
    """Through daphne: cancelling the held job fails within the web server's limit with 503 and
    changes nothing; the other user's requests are served meanwhile."""
    live_stack.portal(DATABASE_LOCK_WAIT_S=str(WEB_LOCK_WAIT_S))
    api = {user: {"Authorization": f"Token {ApiToken.issue(job.owner, 'stuck')[1]}"}
           for user, job in (("alice", held), ("bob", other))}
    started = time.monotonic()
    response = requests.post(f"{live_stack.base_url}/api/v1/jobs/{held.pk}/cancel/", headers=api["alice"], timeout=30)
    waited = time.monotonic() - started
    assert response.status_code == 503, response.text
    assert "held by another transaction" in response.json()["detail"] and response.headers["Retry-After"]
    assert WEB_LOCK_WAIT_S <= waited < WEB_LOCK_WAIT_S + 5
    assert Job.objects.get(pk=held.pk).state == JobState.PENDING
    shown = requests.get(f"{live_stack.base_url}/api/v1/jobs/{held.pk}/", headers=api["alice"], timeout=10)
    assert shown.status_code == 200 and shown.json()["state"] == JobState.PENDING  # reading never waits
    listed = requests.get(f"{live_stack.base_url}/api/v1/jobs/", headers=api["bob"], timeout=10)
    assert listed.status_code == 200 and [j["id"] for j in listed.json()["results"]] == [other.pk]


def test_a_session_gone_silent_holding_a_job_s_row_lock_delays_only_that_job_until_postgresql_ends_it(
        live_stack) -> None:  # noqa: ANN001
    live_stack.settings.update(SETTINGS, DATABASE_IDLE_IN_TRANSACTION_S=str(IDLE_LIMIT_S))
    job = submit(make_user("alice"), "held", command="true", grace_period=1)
    other = submit(make_user("bob"), "other", command="true", grace_period=1)
    holder = psycopg.connect(live_stack.database_url, options=idle_in_transaction_option(IDLE_LIMIT_S))
    try:
        holder.execute("SELECT id FROM scheduler_job WHERE id = %s FOR UPDATE", (job.pk,))
        stop = threading.Event()
        talking = threading.Thread(target=_keep_talking, args=(holder, stop), daemon=True)
        talking.start()
        try:
            live_stack.worker()
            start_agents(live_stack, ("a", 2))
            # The loop's cycle, the only writer, tries the held row (it locks the jobs it starts), waits
            # for it up to its limit, then goes on without it: the other user's job runs to the end.
            wait_until(lambda: _waiting_on(holder), "the loop to wait on the job's row lock")
            assert all("scheduler_job" in query for _, query in _waiting_on(holder))
            wait_until(lambda: Job.objects.get(pk=other.pk).state == JobState.COMPLETED,
                       "the other user's job to complete while the row is held", timeout=WAIT)
            _web_requests_about_the_held_job_get_503(live_stack, job, other)
            time.sleep(2 * IDLE_LIMIT_S)  # a session that keeps talking is never ended
            assert not Attempt.objects.filter(job=job).exists()
            assert Job.objects.get(pk=job.pk).state == JobState.PENDING
        finally:
            stop.set()  # from here on the session says nothing
            talking.join()

        wait_until(lambda: Job.objects.get(pk=job.pk).state == JobState.COMPLETED,
                   "the held job to complete once the silent session is ended", timeout=WAIT)
        with pytest.raises(psycopg.errors.IdleInTransactionSessionTimeout):
            holder.execute("SELECT 1")
    finally:
        holder.close()
    for j in (job, other):
        assert [(a.number, a.state) for a in Attempt.objects.filter(job=j)] == [(1, AttemptState.COMPLETED)]
    assert allocation_problems() == []
