"""Session secrets are sealed at rest: the database holds ciphertext, the portal reads the secret."""

from __future__ import annotations

import base64
import importlib
import logging
from datetime import timedelta
from types import SimpleNamespace

import pytest
from django.db import connection
from django.utils import timezone

from interactive import sealed, selectors
from interactive.models import SessionEndpoint
from scheduler.models import Job
from tests.support.live_helpers import make_node, make_user
from tests.support.placed_jobs import placed_job

pytestmark = pytest.mark.django_db

SECRET = "Ab3_-" * 8 + "xyz"  # 43 characters, as the agent makes them


def stored_secret(job_id: int) -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT secret FROM interactive_sessionendpoint WHERE job_id = %s", [job_id])
        return cursor.fetchone()[0]


@pytest.fixture
def session(no_triggers):  # noqa: ANN001
    make_node("n1", 1)
    job = placed_job(make_user("alice"), {"n1": [0]}, session_kind="jupyter", job_class="TE", time_limit=3600)
    Job.objects.filter(pk=job.pk).update(started_at=timezone.now() - timedelta(seconds=60))
    SessionEndpoint.objects.create(job=job, attempt=1, node="n1", host="10.0.0.5", port=8888, secret=SECRET,
                                   ready_at=timezone.now())
    return job


def test_the_database_holds_the_secret_sealed_and_the_portal_reads_it_plain(session) -> None:  # noqa: ANN001
    stored = stored_secret(session.pk)
    assert stored.startswith(sealed.PREFIX) and SECRET not in stored
    assert len(stored) == sealed.sealed_length(len(SECRET))
    assert SessionEndpoint.objects.get(job=session).secret == SECRET
    assert selectors.target(session.owner, session.pk).secret == SECRET


def test_each_seal_has_its_own_nonce_and_a_changed_byte_opens_nothing(caplog) -> None:  # noqa: ANN001
    first, second = sealed.seal(SECRET), sealed.seal(SECRET)
    assert first != second and sealed.unseal(first) == sealed.unseal(second) == SECRET
    raw = bytearray(base64.urlsafe_b64decode(first[len(sealed.PREFIX):]))
    raw[20] ^= 0x01  # one bit of the ciphertext
    flipped = sealed.PREFIX + base64.urlsafe_b64encode(bytes(raw)).decode()
    with caplog.at_level(logging.ERROR, logger="interactive.sealed"):
        assert sealed.unseal(flipped) == ""
        assert sealed.unseal(SECRET) == ""  # a value never sealed
        assert sealed.unseal(sealed.PREFIX + "!!") == ""
    assert len(caplog.records) == 3 and all(SECRET not in r.getMessage() for r in caplog.records)


def test_the_longest_secret_fits_the_column() -> None:
    longest = "x" * 128  # the most the session contract accepts
    assert len(sealed.seal(longest)) == sealed.sealed_length(128) <= SessionEndpoint._meta.get_field("secret").max_length


def test_a_rotated_key_opens_old_secrets_only_while_it_is_a_fallback(session, settings, caplog) -> None:  # noqa: ANN001
    old = settings.SECRET_KEY
    settings.SECRET_KEY, settings.SECRET_KEY_FALLBACKS = "a-new-key-" * 5, [old]
    assert selectors.target(session.owner, session.pk).secret == SECRET
    settings.SECRET_KEY_FALLBACKS = []
    with caplog.at_level(logging.ERROR, logger="interactive.sealed"):
        assert selectors.target(session.owner, session.pk) is None  # unreachable, never a wrong secret
    assert "SECRET_KEY_FALLBACKS" in caplog.text


def test_the_migration_seals_secrets_stored_in_clear(session) -> None:  # noqa: ANN001
    with connection.cursor() as cursor:
        cursor.execute("UPDATE interactive_sessionendpoint SET secret = %s WHERE job_id = %s", [SECRET, session.pk])
    migration = importlib.import_module("interactive.migrations.0002_sealed_secret")
    migration.seal_stored_secrets(None, SimpleNamespace(connection=connection))
    stored = stored_secret(session.pk)
    assert stored.startswith(sealed.PREFIX) and SECRET not in stored
    assert SessionEndpoint.objects.get(job=session).secret == SECRET
    migration.seal_stored_secrets(None, SimpleNamespace(connection=connection))  # sealed once, not twice
    assert SessionEndpoint.objects.get(job=session).secret == SECRET
