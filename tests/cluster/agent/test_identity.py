"""Resolving run_as through NSS, and the accounts a job never runs as."""

from __future__ import annotations

import os
import pwd

import pytest

from cluster.agent.identity import IdentityError, agent_user, resolve
from tests.cluster.agent.confined import USER_A, ensure_users


def test_a_regular_user_resolves_with_its_groups():
    entry = ensure_users()[0]
    who = resolve(USER_A)
    assert (who.uid, who.gid, who.home, who.drop) == (entry.pw_uid, entry.pw_gid, entry.pw_dir, True)
    assert entry.pw_gid in who.groups and 0 not in who.groups
    assert who.shim_args() == ["--uid", str(entry.pw_uid), "--gid", str(entry.pw_gid),
                               "--groups", ",".join(str(g) for g in who.groups)]


@pytest.mark.parametrize(("name", "why"), [
    ("root", "uid 0"),
    ("daemon", "system account"),
    ("nobody", "overflow"),
    ("no-such-user-x", "no such user"),
    ("", "empty"),
])
def test_root_system_accounts_nobody_unknown_and_empty_users_are_refused(name, why):
    with pytest.raises(IdentityError, match=why):
        resolve(name)


def test_the_minimum_uid_is_configurable():
    daemon_uid = pwd.getpwnam("daemon").pw_uid
    assert resolve("daemon", min_uid=daemon_uid).uid == daemon_uid


def test_single_user_mode_runs_as_the_agents_user_without_a_switch():
    who = agent_user()
    assert (who.uid, who.drop, who.shim_args()) == (os.getuid(), False, [])
