"""The LDAP authentication backend: django-auth-ldap's, plus two things it lacks.

* When the directory cannot be used (down, timed out, refused the search
  account), the request is marked so that the login page says so instead of
  "wrong password" (portal/login.py); local accounts log in as usual.
* With ``LDAP_PROJECT_GROUPS`` on, at each LDAP login the user's project
  memberships are made to follow their LDAP groups: the user becomes a member of
  every existing project named like one of their groups (the group's ``cn``)
  and stops being a member of the others. LDAP is then the source of truth for
  the memberships of LDAP users (an admin's change lasts until their next
  login); projects themselves are still created by admins, never from LDAP.
  A membership that is kept keeps its "default project" flag.

Loaded only when ``LDAP_SERVER_URI`` is set (portal/ldap_config.py), so the
module may import django-auth-ldap.
"""

from __future__ import annotations

from collections.abc import Iterable

from django.conf import settings
from django.db import transaction
from django.http import HttpRequest
from django_auth_ldap.backend import LDAPBackend, ldap_error

from portal.login import DIRECTORY_UNAVAILABLE
from scheduler.projects import Membership, Project


class DirectoryBackend(LDAPBackend):
    """django-auth-ldap's backend with project memberships from LDAP groups (module doc)."""

    def authenticate_ldap_user(self, ldap_user, password: str):  # noqa: ANN001, ANN201 - django-auth-ldap types
        user = super().authenticate_ldap_user(ldap_user, password)
        if user is not None and settings.LDAP_PROJECT_GROUPS:
            sync_project_memberships(user, ldap_user.group_names)
        return user


def sync_project_memberships(user, group_names: Iterable[str]) -> tuple[list[str], list[str]]:  # noqa: ANN001
    """Make ``user``'s memberships exactly the projects named in ``group_names``.

    Returns the names of the projects joined and left (sorted). Group names
    naming no project are ignored.
    """
    wanted = set(Project.objects.filter(name__in=set(group_names)).values_list("name", flat=True))
    with transaction.atomic():
        current = {m.project.name: m for m in Membership.objects.select_related("project").filter(user=user)}
        left = sorted(set(current) - wanted)
        Membership.objects.filter(user=user, project__name__in=left).delete()
        joined = sorted(wanted - set(current))
        Membership.objects.bulk_create(
            [Membership(user=user, project=p) for p in Project.objects.filter(name__in=joined)])
    return joined, left


def _mark_unavailable(sender, context: str, request: HttpRequest | None = None, **kwargs: object) -> None:  # noqa: ANN001
    """An LDAP error while logging in (looking the user up, binding, reading groups): the
    directory could not be used for this request. Only read when the login then fails."""
    if request is not None:
        setattr(request, DIRECTORY_UNAVAILABLE, True)


ldap_error.connect(_mark_unavailable, dispatch_uid="gpusched-ldap-unavailable")
