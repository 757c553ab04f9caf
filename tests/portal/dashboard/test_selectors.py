"""The cluster page's queue lists pending jobs in the order the scheduler considers them."""

from __future__ import annotations

import pytest
from django.utils import timezone

from portal.dashboard.selectors import queue_by_class

pytestmark = pytest.mark.django_db


def test_the_queue_puts_higher_priority_first_then_submission_order(roles, make_job) -> None:  # noqa: ANN001
    early = make_job(roles.owner, state="PENDING", name="early", priority=0)
    urgent = make_job(roles.owner, state="PENDING", name="urgent", priority=100)
    late = make_job(roles.owner, state="PENDING", name="late", priority=0)
    low = make_job(roles.owner, state="PENDING", name="low", priority=-5)
    listed = queue_by_class(roles.owner, timezone.now())["BE"]["jobs"]
    assert [(j["id"], j["position"]) for j in listed] == [(urgent.pk, 1), (early.pk, 2), (late.pk, 3), (low.pk, 4)]
