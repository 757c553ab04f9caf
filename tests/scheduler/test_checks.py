"""The policy setting's system check: an unknown name is an error, a simulator-only policy a warning
that says why, any other registered policy passes."""

from __future__ import annotations

import pytest

from scheduler.checks import check_policy_setting


@pytest.mark.parametrize("policy, ids", [("fitgpp", []), ("pollux", []), ("rubick", []),
                                         ("optimus", ["scheduler.W003"]), ("fit-gpp", ["scheduler.E001"])])
def test_the_policy_setting_is_checked(settings, policy, ids) -> None:
    settings.SCHEDULER_POLICY = policy
    found = check_policy_setting(None)
    assert [m.id for m in found] == ids
    if policy == "optimus":
        assert "simulator policy" in found[0].msg and "would never start" in found[0].msg
        assert "pollux" in found[0].hint
