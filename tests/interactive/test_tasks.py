"""REPORT_SESSION on the server: stored only for the current attempt of a session on the reporting node."""

from __future__ import annotations

import pytest

from cluster import session_contract, session_seal
from interactive import tasks
from interactive.models import SessionEndpoint
from scheduler.models import JobState
from tests.support.live_helpers import make_node, make_user
from tests.support.placed_jobs import placed_job

pytestmark = pytest.mark.django_db

SECRET = "k" * 43


@pytest.fixture
def job(no_triggers):  # noqa: ANN001
    make_node("n1", 2)
    make_node("n2", 2)
    return placed_job(make_user("alice"), {"n1": [0]}, session_kind="jupyter", job_class="TE")


def report(job, **kw):  # noqa: ANN001, ANN201
    fields = {"node": "n1", "job_id": job.pk, "attempt": 1, "host": "10.0.0.5", "port": 8888, "secret": SECRET,
              "token": "", **kw}
    return tasks.session_ready.apply(kwargs=fields)


def test_the_task_is_registered_under_the_contract_name() -> None:
    from portal.celery import app

    assert session_contract.REPORT_SESSION in app.tasks


def test_a_report_stores_where_the_session_listens(job) -> None:  # noqa: ANN001
    report(job)
    row = SessionEndpoint.objects.get(job=job)
    assert (row.attempt, row.node, row.host, row.port, row.secret) == (1, "n1", "10.0.0.5", 8888, SECRET)


@pytest.mark.parametrize("kw", [{"node": "n2"}, {"attempt": 2}, {"attempt": 0}, {"port": 0}, {"secret": "short"},
                                {"host": "a b"}, {"job_id": 999999}, {"job_id": "../x"}])
def test_a_report_from_the_wrong_node_attempt_or_with_bad_fields_stores_nothing(job, kw) -> None:  # noqa: ANN001
    report(job, **kw)
    assert not SessionEndpoint.objects.exists()


def sealed(settings, node: str = "n1", job_id: int = 0, attempt: int = 1, key: str = "") -> str:  # noqa: ANN001
    return session_seal.seal_to(session_seal.public_key_text(key or settings.SECRET_KEY), SECRET,
                                session_seal.context(node, job_id, attempt))


def test_a_secret_sealed_to_this_server_for_this_session_is_stored(job, settings) -> None:  # noqa: ANN001
    report(job, secret=None, sealed_secret=sealed(settings, job_id=job.pk))
    assert SessionEndpoint.objects.get(job=job).secret == SECRET


def test_a_secret_sealed_under_a_key_kept_as_a_fallback_is_stored(job, settings) -> None:  # noqa: ANN001
    settings.SECRET_KEY_FALLBACKS = ["the key before"]
    report(job, secret=None, sealed_secret=sealed(settings, job_id=job.pk, key="the key before"))
    assert SessionEndpoint.objects.get(job=job).secret == SECRET


@pytest.mark.parametrize("wrong", [{"node": "n2"}, {"attempt": 2}, {"job_id": -1}, {"key": "another server"}])
def test_a_sealed_secret_for_another_session_or_server_stores_nothing(job, settings, wrong, caplog) -> None:  # noqa: ANN001
    args = {"job_id": job.pk, **wrong}
    report(job, secret=SECRET, sealed_secret=sealed(settings, **args))  # a clear secret beside it changes nothing
    assert not SessionEndpoint.objects.exists()
    assert "sealed_secret" in caplog.text and SECRET not in caplog.text


def test_a_batch_job_or_an_ended_session_stores_nothing(job, no_triggers) -> None:  # noqa: ANN001
    from scheduler.models import Job

    batch = placed_job(make_user("bob"), {"n1": [1]})
    report(batch)
    Job.objects.filter(pk=job.pk).update(state=JobState.CANCELLING)
    report(job)
    assert not SessionEndpoint.objects.exists()


def test_a_report_without_the_node_token_is_refused(job, settings) -> None:  # noqa: ANN001
    settings.GPUSCHED_AGENT_DEV_MODE = False
    settings.GPUSCHED_AGENT_SECRET = "server-secret"
    report(job, token="forged")
    assert not SessionEndpoint.objects.exists()
