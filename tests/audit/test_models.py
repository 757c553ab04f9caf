"""Audit rows are append-only through the ORM (audit.models)."""

from __future__ import annotations

import pytest

from audit.models import AuditEntry, AuditLogIsAppendOnly
from audit.services import changed_fields, record

pytestmark = pytest.mark.django_db


def test_a_row_cannot_be_edited_or_deleted() -> None:
    entry = record("quota.changed", target="quota of user bob", actor_name="carol", changes={"max_gpus": [1, 2]})
    entry.detail = "rewritten"
    with pytest.raises(AuditLogIsAppendOnly):
        entry.save()
    with pytest.raises(AuditLogIsAppendOnly):
        entry.delete()
    with pytest.raises(AuditLogIsAppendOnly):
        AuditEntry.objects.filter(pk=entry.pk).update(detail="rewritten")
    with pytest.raises(AuditLogIsAppendOnly):
        AuditEntry.objects.all().delete()
    stored = AuditEntry.objects.get()
    assert (stored.detail, stored.changes) == ("", {"max_gpus": [1, 2]})


def test_changed_fields_lists_only_what_differs() -> None:
    assert changed_fields({"a": 1, "b": 2}, {"a": 1, "b": 3, "c": None}) == {"b": [2, 3]}
    assert changed_fields({}, {"a": 1}) == {"a": [None, 1]}
