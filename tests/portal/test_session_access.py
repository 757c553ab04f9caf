"""The proxy's access check: notes activity, audits staff access at most once an hour per session."""

from __future__ import annotations

import pytest

from audit.models import Action, AuditEntry
from interactive.models import SessionEndpoint
from portal.session_access import open_target

pytestmark = pytest.mark.django_db


def test_owner_access_notes_activity_and_is_not_audited(roles, make_session) -> None:  # noqa: ANN001
    job = make_session(roles.owner, 1)
    assert open_target(roles.owner, job.pk).job_id == job.pk
    assert SessionEndpoint.objects.get(job=job).last_activity_at is not None
    assert not AuditEntry.objects.exists()


def test_refused_access_writes_nothing(roles, make_session) -> None:  # noqa: ANN001
    job = make_session(roles.owner, 1)
    assert open_target(roles.other, job.pk) is None and open_target(roles.staff, job.pk) is None
    assert SessionEndpoint.objects.get(job=job).last_activity_at is None
    assert not AuditEntry.objects.exists()


def test_staff_access_is_audited_once_with_the_address(roles, make_session, settings) -> None:  # noqa: ANN001
    settings.GPUSCHED_SESSION_STAFF_ACCESS = True
    job = make_session(roles.owner, 1)
    for _ in range(3):
        assert open_target(roles.staff, job.pk, "192.0.2.1").by_staff is True
    entry = AuditEntry.objects.get()
    assert (entry.action, entry.actor, entry.ip) == (Action.SESSION_OPENED_BY_STAFF, roles.staff, "192.0.2.1")
    assert roles.owner.get_username() in entry.target
