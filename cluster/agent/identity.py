"""Who a job runs as: a POSIX user resolved on this node, never root or a system account.

Names are resolved through the C library's user database (``pwd``/``grp``,
i.e. NSS), so users from LDAP or SSSD work like local ones. The agent runs as
root and the job's process drops to the identity (see shim.py): supplementary
groups, then the primary group, then the user, then no_new_privs.

Single-user mode (``--single-user``, for a laptop or a demo without root):
every job runs as the agent's own user, whatever its ``run_as``.
"""

from __future__ import annotations

import os
import pwd
from dataclasses import dataclass

# Accounts below this uid are the system's (Debian: 0-999); a job never runs as one by default.
DEFAULT_MIN_UID = 1000
# The kernel's overflow uid: "nobody", owner of files that map to no user; never a job's owner.
OVERFLOW_UID = 65534


class IdentityError(ValueError):
    """``run_as`` cannot be used on this node; the message says why."""


@dataclass(frozen=True)
class JobIdentity:
    """The uid, gids, home and name a job runs with; ``drop`` is False when no switch is needed."""

    user: str
    uid: int
    gid: int
    groups: tuple[int, ...]
    home: str
    drop: bool = True

    def shim_args(self) -> list[str]:
        """The shim's options that make it drop its child to this identity (none when ``drop`` is False)."""
        if not self.drop:
            return []
        return ["--uid", str(self.uid), "--gid", str(self.gid), "--groups", ",".join(str(g) for g in self.groups)]


def resolve(name: str, min_uid: int = DEFAULT_MIN_UID) -> JobIdentity:
    """The identity of user ``name``; raises IdentityError for an unknown user, root or a system account."""
    if not name:
        raise IdentityError("run_as is empty: this agent runs jobs only as their owner (start it with "
                            "--single-user to run every job as the agent's own user)")
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        raise IdentityError(f"run_as {name!r}: no such user on this node (checked through NSS)") from None
    if entry.pw_uid == 0:
        raise IdentityError(f"run_as {name!r}: refusing to run a job as uid 0")
    if entry.pw_uid == OVERFLOW_UID:
        raise IdentityError(f"run_as {name!r}: uid {OVERFLOW_UID} is the kernel's overflow user, not a person")
    if entry.pw_uid < min_uid:
        raise IdentityError(f"run_as {name!r}: uid {entry.pw_uid} is a system account (below the minimum {min_uid})")
    if entry.pw_gid == 0:
        raise IdentityError(f"run_as {name!r}: refusing a primary group of gid 0")
    groups = tuple(g for g in dict.fromkeys(os.getgrouplist(name, entry.pw_gid)) if g != 0)
    return JobIdentity(user=name, uid=entry.pw_uid, gid=entry.pw_gid, groups=groups, home=entry.pw_dir or "/")


def agent_user() -> JobIdentity:
    """The agent's own user, as single-user mode runs every job (no privilege change)."""
    uid = os.getuid()
    try:
        entry = pwd.getpwuid(uid)
        name, home = entry.pw_name, entry.pw_dir
    except KeyError:  # a container user without a passwd entry
        name, home = str(uid), os.environ.get("HOME", "/")
    return JobIdentity(user=name, uid=uid, gid=os.getgid(), groups=tuple(os.getgroups()), home=home, drop=False)
