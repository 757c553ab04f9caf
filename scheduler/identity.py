"""Who a user's jobs run as on the nodes: the POSIX identity of a portal user.

A job runs on its node as its owner's POSIX account (uid, primary gid and
supplementary groups), which the node's agent resolves by *name* through the
system user database (NSS: ``/etc/passwd``, LDAP, SSSD, ...). The server never
resolves uids: it stores the name, checks its syntax and refuses names that
can only mean a privileged account (``root``); the node refuses any name that
resolves to uid 0 or to a system account (below its minimum uid).

The name of a user is, in order:

* their ``PosixIdentity`` row, set by an admin in the admin (user page), or
* their Django username, when it is a valid POSIX name (``alice``, not
  ``alice@example.org``).

A user with neither has no usable identity and cannot submit jobs (except in
single-user mode, ``GPUSCHED_SINGLE_USER``, where every job runs as the
agent's own user and the launch names nobody).

Why in the scheduler app: the identity is a rule of submission
(``scheduler.services``) and a field of every launch (``scheduler.apply``),
like the quotas that also live here.
"""

from __future__ import annotations

import re

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db import models
from django.utils import timezone

#: Longest POSIX user name accepted (useradd's and most NSS back ends' limit).
MAX_POSIX_NAME = 32
# useradd's default rule, the one the node's launch check applies (cluster.protocol): lower-case
# letters, digits, ".", "_" and "-", starting with a letter or "_".
_POSIX_NAME_RE = re.compile(r"^[a-z_][a-z0-9._-]*$")
#: Names refused whatever the node's database says: they can only mean uid 0.
PRIVILEGED_NAMES = frozenset({"root", "toor"})


def posix_name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a job's POSIX user name, or None when its syntax is acceptable."""
    if not name:
        return "A POSIX user name may not be empty."
    if len(name) > MAX_POSIX_NAME:
        return f"A POSIX user name has at most {MAX_POSIX_NAME} characters."
    if not _POSIX_NAME_RE.fullmatch(name):  # not match(): "$" would accept a trailing newline
        return (f"{name!r} is not a POSIX user name: use lower-case letters, digits, '.', '_' "
                "and '-', starting with a letter or '_'.")
    if name in PRIVILEGED_NAMES:
        return f"Jobs never run as {name!r}: that name is the superuser's."
    return None


def validate_posix_name(name: str) -> None:
    """Model-field validator: raise ``ValidationError`` naming the problem."""
    problem = posix_name_problem(name)
    if problem:
        raise ValidationError(problem)


class PosixIdentity(models.Model):
    """The POSIX account a portal user's jobs run as (set by an admin)."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="posix_identity")
    posix_name = models.CharField(
        max_length=MAX_POSIX_NAME, validators=[validate_posix_name], verbose_name="POSIX user name",
        help_text="The account jobs run as on the nodes, resolved there through NSS (passwd, LDAP, SSSD).",
    )
    note = models.CharField(max_length=200, blank=True, default="")
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        app_label = "scheduler"
        verbose_name = "POSIX identity"
        verbose_name_plural = "POSIX identities"

    def __str__(self) -> str:
        return f"{self.user} runs as {self.posix_name}"

    def save(self, *args, **kwargs) -> None:  # noqa: ANN002, ANN003
        self.updated_at = timezone.now()
        super().save(*args, **kwargs)


class IdentityMissing(Exception):
    """The user has no usable POSIX identity; the message says why and what to do."""


def single_user_mode() -> bool:
    """True when every job runs as the agents' own user (``GPUSCHED_SINGLE_USER``)."""
    return bool(getattr(settings, "GPUSCHED_SINGLE_USER", False))


def stored_posix_name(user) -> str | None:  # noqa: ANN001 - a user model instance
    """The POSIX name an admin stored for ``user``, None when there is none.

    No query when the user was read with its identity (``select_related("posix_identity")``, as
    the API's token authentication reads it: one statement less per submission); else one.
    """
    if get_user_model().posix_identity.is_cached(user):  # the class's: ``user`` may be a lazy proxy
        try:
            return user.posix_identity.posix_name
        except PosixIdentity.DoesNotExist:  # read with the user: it has none
            return None
    return PosixIdentity.objects.filter(user_id=user.pk).values_list("posix_name", flat=True).first()


def run_as_for(user) -> str:  # noqa: ANN001 - a user model instance
    """The POSIX name ``user``'s jobs run as ("" in single-user mode).

    Raises ``IdentityMissing`` when the user has no usable identity: no
    identity row and a username that is not a valid POSIX name, or a stored
    name that is no longer acceptable.
    """
    if single_user_mode():
        return ""
    row = stored_posix_name(user)
    name = row if row is not None else user.get_username()
    problem = posix_name_problem(name)
    if problem is None:
        return name
    if row is None:
        raise IdentityMissing(
            f"Your account has no POSIX identity to run jobs as (the username {name!r} is not a usable "
            f"POSIX user name: {problem}). Ask an administrator to set one.")
    raise IdentityMissing(f"Your POSIX identity {name!r} is not usable: {problem} Ask an administrator to fix it.")
