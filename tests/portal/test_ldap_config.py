"""LDAP settings from the environment: off unless LDAP_SERVER_URI is set, bad values name the variable."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured

from portal.ldap_config import LDAP_BACKEND, MODEL_BACKEND, ldap_settings
from tests.conftest import unavailable

BASE = {"LDAP_SERVER_URI": "ldap://directory.example.org", "LDAP_USER_SEARCH_BASE": "ou=people,dc=example,dc=org"}


@pytest.fixture(autouse=True)
def auth_ldap() -> None:
    try:
        import django_auth_ldap  # noqa: F401
    except ImportError:
        unavailable("django-auth-ldap is not installed (pip install '.[ldap]'; needs libldap2-dev libsasl2-dev)")


def test_off_without_a_server_uri() -> None:
    assert ldap_settings({}) == {}
    assert ldap_settings({"LDAP_BIND_DN": "cn=x", "LDAP_STAFF_GROUP": "cn=staff"}) == {}


def test_local_accounts_are_checked_first() -> None:
    values = ldap_settings(BASE)
    assert values["AUTHENTICATION_BACKENDS"] == [MODEL_BACKEND, LDAP_BACKEND]
    assert values["AUTH_LDAP_SERVER_URI"] == "ldap://directory.example.org"
    assert values["AUTH_LDAP_USER_SEARCH"].filterstr == "(uid=%(user)s)"
    assert values["AUTH_LDAP_START_TLS"] is False and values["LDAP_PROJECT_GROUPS"] is False
    assert "AUTH_LDAP_GROUP_SEARCH" not in values


def test_groups_staff_required_group_and_start_tls(tmp_path) -> None:  # noqa: ANN001
    secret = tmp_path / "bind"
    secret.write_text("s3cret\n")
    values = ldap_settings({**BASE, "LDAP_GROUP_SEARCH_BASE": "ou=groups,dc=example,dc=org",
                            "LDAP_GROUP_TYPE": "posixGroup", "LDAP_STAFF_GROUP": "cn=staff,ou=groups",
                            "LDAP_REQUIRE_GROUP": "cn=gpu,ou=groups", "LDAP_START_TLS": "1",
                            "LDAP_BIND_PASSWORD_FILE": str(secret), "LDAP_PROJECT_GROUPS": "true"})
    assert values["AUTH_LDAP_BIND_PASSWORD"] == "s3cret"
    assert values["AUTH_LDAP_GROUP_SEARCH"].filterstr == "(objectClass=posixGroup)"
    assert type(values["AUTH_LDAP_GROUP_TYPE"]).__name__ == "PosixGroupType"
    assert values["AUTH_LDAP_USER_FLAGS_BY_GROUP"] == {"is_staff": "cn=staff,ou=groups"}
    assert values["AUTH_LDAP_REQUIRE_GROUP"] == "cn=gpu,ou=groups"
    assert values["AUTH_LDAP_MIRROR_GROUPS"] is True and values["AUTH_LDAP_START_TLS"] is True
    assert values["LDAP_PROJECT_GROUPS"] is True


@pytest.mark.parametrize(("environ", "named"), [
    ({"LDAP_SERVER_URI": "http://x"}, "LDAP_SERVER_URI"),
    ({"LDAP_SERVER_URI": "ldap://x"}, "LDAP_USER_SEARCH_BASE"),
    ({**BASE, "LDAP_USER_FILTER": "uid=%(user)s"}, "LDAP_USER_FILTER"),
    ({**BASE, "LDAP_USER_FILTER": "(uid=fixed)"}, "LDAP_USER_FILTER"),
    ({"LDAP_SERVER_URI": "ldap://x", "LDAP_USER_DN_TEMPLATE": "uid=dora,dc=x"}, "LDAP_USER_DN_TEMPLATE"),
    ({**BASE, "LDAP_STAFF_GROUP": "cn=staff"}, "LDAP_STAFF_GROUP"),
    ({**BASE, "LDAP_REQUIRE_GROUP": "cn=gpu"}, "LDAP_REQUIRE_GROUP"),
    ({**BASE, "LDAP_PROJECT_GROUPS": "1"}, "LDAP_PROJECT_GROUPS"),
    ({**BASE, "LDAP_GROUP_SEARCH_BASE": "ou=g", "LDAP_GROUP_TYPE": "nisNetgroup"}, "LDAP_GROUP_TYPE"),
    ({**BASE, "LDAP_START_TLS": "yes"}, "LDAP_START_TLS"),
    ({**BASE, "LDAP_TIMEOUT": "0"}, "LDAP_TIMEOUT"),
    ({**BASE, "LDAP_BIND_PASSWORD_FILE": "/nonexistent/bind"}, "LDAP_BIND_PASSWORD_FILE"),
])
def test_a_bad_value_is_refused_naming_the_variable(environ: dict[str, str], named: str) -> None:
    with pytest.raises(ImproperlyConfigured, match=named):
        ldap_settings(environ)
