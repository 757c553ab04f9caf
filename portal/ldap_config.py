"""LDAP login settings, read from the environment (docs/security.md, "LDAP login").

LDAP login is on only when ``LDAP_SERVER_URI`` is set; then
:func:`ldap_settings` returns the ``AUTH_LDAP_*`` settings of django-auth-ldap
and the authentication backends to use. Local accounts keep working: Django's
``ModelBackend`` stays first, so a local password is checked without asking
the directory (and works while it is down), and the directory is asked only
when no local account accepted the password.

Variables:

* ``LDAP_SERVER_URI``: ``ldap://host[:port]`` or ``ldaps://...``; turns LDAP on.
* ``LDAP_BIND_DN``, ``LDAP_BIND_PASSWORD`` (or ``LDAP_BIND_PASSWORD_FILE``):
  the account that searches the directory; empty: an anonymous bind.
* ``LDAP_USER_DN_TEMPLATE`` (e.g. ``uid=%(user)s,ou=people,dc=example,dc=org``),
  or ``LDAP_USER_SEARCH_BASE`` with ``LDAP_USER_FILTER`` (default
  ``(uid=%(user)s)``): how a username becomes an entry. One is required.
  django-auth-ldap escapes the username in both (no filter injection).
* ``LDAP_GROUP_SEARCH_BASE``: where groups are; their ``cn`` names the Django
  group they are mirrored to. ``LDAP_GROUP_TYPE``: ``groupOfNames`` (default),
  ``groupOfUniqueNames`` or ``posixGroup``.
* ``LDAP_STAFF_GROUP``: DN of the group whose members get ``is_staff``.
* ``LDAP_REQUIRE_GROUP``: DN of the group a user must be in to log in.
* ``LDAP_MIRROR_GROUPS`` (true with a group search base): Django groups follow
  the LDAP groups at each login.
* ``LDAP_PROJECT_GROUPS`` (false): a user's project memberships follow the LDAP
  groups named like a project (portal/ldap_backend.py).
* ``LDAP_START_TLS`` (false): StartTLS on ``ldap://``; ``LDAP_CA_FILE``: the CA
  certificates to check the server against.
* ``LDAP_TIMEOUT`` (5): seconds to wait for the server, so a dead directory
  does not hold a login for long.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from django.core.exceptions import ImproperlyConfigured

from portal.env import env_bool, env_int, env_str, read_secret_file

MODEL_BACKEND = "django.contrib.auth.backends.ModelBackend"
LDAP_BACKEND = "portal.ldap_backend.DirectoryBackend"
GROUP_TYPES = ("groupOfNames", "groupOfUniqueNames", "posixGroup")


def ldap_settings(environ: Mapping[str, str] = os.environ) -> dict[str, object]:
    """The settings LDAP login adds: ``{}`` when ``LDAP_SERVER_URI`` is unset, else
    ``AUTHENTICATION_BACKENDS``, the ``AUTH_LDAP_*`` values and ``LDAP_PROJECT_GROUPS``.

    Raises ``ImproperlyConfigured`` naming the variable when a value cannot be
    used, or when django-auth-ldap is not installed (``pip install '.[ldap]'``).
    """
    uri = env_str("LDAP_SERVER_URI", environ=environ)
    if not uri:
        return {}
    if not uri.startswith(("ldap://", "ldaps://")):
        raise ImproperlyConfigured(f"LDAP_SERVER_URI={uri!r} must start with ldap:// or ldaps://")
    try:
        import ldap
        from django_auth_ldap.config import LDAPSearch
    except ImportError:
        raise ImproperlyConfigured(
            "LDAP_SERVER_URI is set but django-auth-ldap is not installed: pip install '.[ldap]' "
            "(building python-ldap needs libldap2-dev and libsasl2-dev)") from None
    timeout = env_int("LDAP_TIMEOUT", 5, environ=environ, minimum=1)
    values: dict[str, object] = {
        "AUTHENTICATION_BACKENDS": [MODEL_BACKEND, LDAP_BACKEND],
        "AUTH_LDAP_SERVER_URI": uri,
        "AUTH_LDAP_BIND_DN": env_str("LDAP_BIND_DN", "", environ=environ),
        "AUTH_LDAP_BIND_PASSWORD": _bind_password(environ),
        "AUTH_LDAP_START_TLS": env_bool("LDAP_START_TLS", False, environ=environ),
        "AUTH_LDAP_CONNECTION_OPTIONS": {ldap.OPT_NETWORK_TIMEOUT: timeout, ldap.OPT_TIMEOUT: timeout,
                                         ldap.OPT_REFERRALS: 0},
        "AUTH_LDAP_USER_ATTR_MAP": {"first_name": "givenName", "last_name": "sn", "email": "mail"},
        # Flags and groups are read again at every login, so leaving a group takes effect then.
        "AUTH_LDAP_ALWAYS_UPDATE_USER": True,
        "LDAP_PROJECT_GROUPS": env_bool("LDAP_PROJECT_GROUPS", False, environ=environ),
    }
    ca_file = env_str("LDAP_CA_FILE", environ=environ)
    if ca_file:
        values["AUTH_LDAP_GLOBAL_OPTIONS"] = {ldap.OPT_X_TLS_CACERTFILE: ca_file}
    values.update(_user_lookup(environ, ldap, LDAPSearch))
    values.update(_groups(environ, ldap, LDAPSearch))
    return values


def _bind_password(environ: Mapping[str, str]) -> str:
    path = env_str("LDAP_BIND_PASSWORD_FILE", "", environ=environ)
    return read_secret_file("LDAP_BIND_PASSWORD_FILE", path) if path else env_str(
        "LDAP_BIND_PASSWORD", "", environ=environ)


def _user_lookup(environ: Mapping[str, str], ldap, search_class) -> dict[str, object]:  # noqa: ANN001 - modules
    """A DN template, or a search under a base with a filter holding ``%(user)s``."""
    template = env_str("LDAP_USER_DN_TEMPLATE", environ=environ)
    base = env_str("LDAP_USER_SEARCH_BASE", environ=environ)
    if template:
        if "%(user)s" not in template:
            raise ImproperlyConfigured(f"LDAP_USER_DN_TEMPLATE={template!r} must contain %(user)s")
        return {"AUTH_LDAP_USER_DN_TEMPLATE": template}
    if not base:
        raise ImproperlyConfigured("LDAP_SERVER_URI is set: set LDAP_USER_SEARCH_BASE or LDAP_USER_DN_TEMPLATE too")
    user_filter = env_str("LDAP_USER_FILTER", "(uid=%(user)s)", environ=environ)
    if "%(user)s" not in user_filter or not (user_filter.startswith("(") and user_filter.endswith(")")):
        raise ImproperlyConfigured(f"LDAP_USER_FILTER={user_filter!r} must be a (filter) containing %(user)s")
    return {"AUTH_LDAP_USER_SEARCH": search_class(base, ldap.SCOPE_SUBTREE, user_filter)}


def _groups(environ: Mapping[str, str], ldap, search_class) -> dict[str, object]:  # noqa: ANN001 - modules
    """Group search, type, mirroring, the staff flag and the required group."""
    from django_auth_ldap import config

    base = env_str("LDAP_GROUP_SEARCH_BASE", environ=environ)
    staff = env_str("LDAP_STAFF_GROUP", environ=environ)
    required = env_str("LDAP_REQUIRE_GROUP", environ=environ)
    if not base:
        for name, value in (("LDAP_STAFF_GROUP", staff), ("LDAP_REQUIRE_GROUP", required)):
            if value:
                raise ImproperlyConfigured(f"{name} needs LDAP_GROUP_SEARCH_BASE")
        if env_bool("LDAP_PROJECT_GROUPS", False, environ=environ):
            raise ImproperlyConfigured("LDAP_PROJECT_GROUPS needs LDAP_GROUP_SEARCH_BASE")
        return {}
    kind = env_str("LDAP_GROUP_TYPE", "groupOfNames", environ=environ)
    types = {"groupOfNames": (config.GroupOfNamesType, "groupOfNames"),
             "groupOfUniqueNames": (config.GroupOfUniqueNamesType, "groupOfUniqueNames"),
             "posixGroup": (config.PosixGroupType, "posixGroup")}
    if kind not in types:
        raise ImproperlyConfigured(f"LDAP_GROUP_TYPE={kind!r} is not one of {', '.join(GROUP_TYPES)}")
    group_type, object_class = types[kind]
    values: dict[str, object] = {
        "AUTH_LDAP_GROUP_SEARCH": search_class(base, ldap.SCOPE_SUBTREE, f"(objectClass={object_class})"),
        "AUTH_LDAP_GROUP_TYPE": group_type(name_attr="cn"),
        "AUTH_LDAP_MIRROR_GROUPS": env_bool("LDAP_MIRROR_GROUPS", True, environ=environ),
    }
    if staff:
        values["AUTH_LDAP_USER_FLAGS_BY_GROUP"] = {"is_staff": staff}
    if required:
        values["AUTH_LDAP_REQUIRE_GROUP"] = required
    return values
