"""The priority range quotas allow: the tightest of a user's scopes, named in the message."""

from __future__ import annotations

from scheduler.models import PRIORITY_RANGE
from scheduler.quotas import Limits, Scope, priority_error

def scope(kind, name, low=None, high=None):
    return Scope(kind, name, Limits(min_priority=low, max_priority=high))


def test_the_tightest_range_of_all_scopes_applies_and_names_the_scope():
    scopes = [scope("user", "ann", high=100), scope("group", "lab", low=-10, high=50)]
    assert priority_error(50, scopes, PRIORITY_RANGE) is None
    assert priority_error(51, scopes, PRIORITY_RANGE) == "Must be between -10 and 50 (quota of group lab)."
    assert priority_error(-11, scopes, PRIORITY_RANGE) == "Must be between -10 and 50 (quota of group lab)."
    assert priority_error(999, [], PRIORITY_RANGE) is None
    assert "do not overlap" in priority_error(0, [scope("user", "a", low=10), scope("group", "g", high=5)],
                                              PRIORITY_RANGE)


