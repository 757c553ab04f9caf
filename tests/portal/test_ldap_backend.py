"""LDAP login through the real login page against a real slapd (tests/support/slapd.py).

The settings come from environment values through portal/ldap_config.py, as
in a deployment. Local accounts keep working, with the directory up or down.
"""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group, User
from django.core.cache import caches
from django.test import Client

from tests.conftest import unavailable
from tests.support import slapd as directory

pytestmark = pytest.mark.django_db

LOGIN = "/accounts/login/"


@pytest.fixture(scope="module")
def auth_ldap() -> None:
    try:
        import django_auth_ldap  # noqa: F401
    except ImportError:
        unavailable("django-auth-ldap is not installed (pip install '.[ldap]'; needs libldap2-dev libsasl2-dev)")


@pytest.fixture(scope="module")
def slapd_server(auth_ldap, tmp_path_factory):  # noqa: ANN001, ANN201
    problem = directory.missing_tools()
    if problem:
        unavailable(problem)
    server = directory.start(tmp_path_factory.mktemp("slapd"))
    yield server
    server.stop()


def _environ(uri: str, **extra: str) -> dict[str, str]:
    return {"LDAP_SERVER_URI": uri, "LDAP_BIND_DN": directory.ROOT_DN,
            "LDAP_BIND_PASSWORD": directory.ROOT_PASSWORD, "LDAP_USER_SEARCH_BASE": directory.PEOPLE,
            "LDAP_GROUP_SEARCH_BASE": directory.GROUPS, "LDAP_STAFF_GROUP": f"cn=staff,{directory.GROUPS}",
            "LDAP_TIMEOUT": "2", **extra}


def _configure(settings, environ: dict[str, str]) -> None:  # noqa: ANN001
    from portal.ldap_config import ldap_settings

    for name, value in ldap_settings(environ).items():
        setattr(settings, name, value)
    settings.LOGIN_MAX_FAILURES = 3
    caches["login-throttle"].clear()


@pytest.fixture
def ldap_on(settings, slapd_server):  # noqa: ANN001, ANN201
    _configure(settings, _environ(slapd_server.uri))
    return settings


@pytest.fixture
def local_user() -> User:
    return User.objects.create_user("lena", password="local-account-pw")


def _login(username: str, password: str) -> tuple[Client, object]:
    client = Client(REMOTE_ADDR="10.0.0.7")
    return client, client.post(LOGIN, {"username": username, "password": password})


def _logged_in(client: Client) -> bool:
    return "_auth_user_id" in client.session


def test_a_directory_user_logs_in_and_gets_staff_and_groups(ldap_on) -> None:
    client, response = _login("dora", directory.PASSWORDS["dora"])
    assert response.status_code == 302 and _logged_in(client)
    dora = User.objects.get(username="dora")
    assert dora.is_staff and not dora.is_superuser
    assert (dora.first_name, dora.last_name, dora.email) == ("Dora", "Directory", "dora@example.org")
    assert sorted(dora.groups.values_list("name", flat=True)) == ["everyone", "staff", "vision"]
    assert not dora.has_usable_password()  # the password stays in the directory
    assert client.get("/jobs/").status_code == 200


def test_a_user_outside_the_staff_group_is_not_staff(ldap_on) -> None:
    client, _ = _login("ivan", directory.PASSWORDS["ivan"])
    ivan = User.objects.get(username="ivan")
    assert _logged_in(client) and not ivan.is_staff
    assert list(ivan.groups.values_list("name", flat=True)) == ["everyone"]


def test_leaving_the_staff_group_takes_effect_at_the_next_login(ldap_on) -> None:
    User.objects.create(username="ivan", is_staff=True)  # staff before, not in the LDAP staff group
    _login("ivan", directory.PASSWORDS["ivan"])
    assert not User.objects.get(username="ivan").is_staff


def test_the_required_group_keeps_others_out(settings, slapd_server) -> None:  # noqa: ANN001
    _configure(settings, _environ(slapd_server.uri, LDAP_REQUIRE_GROUP=f"cn=vision,{directory.GROUPS}"))
    assert not _logged_in(_login("ivan", directory.PASSWORDS["ivan"])[0])
    assert _logged_in(_login("dora", directory.PASSWORDS["dora"])[0])


def test_a_wrong_password_is_refused_and_counts_for_the_rate_limit(ldap_on) -> None:
    for _ in range(3):
        client, response = _login("dora", "not-her-password")
        assert response.status_code == 200 and not _logged_in(client)
        assert "correct username and password" in response.content.decode()
    client, response = _login("dora", directory.PASSWORDS["dora"])  # right password, locked out
    assert response.status_code == 429 and not _logged_in(client)
    assert not User.objects.filter(username="dora").exists()


def test_a_local_account_still_logs_in(ldap_on, local_user) -> None:
    client, response = _login("lena", "local-account-pw")
    assert response.status_code == 302 and _logged_in(client)
    assert not _logged_in(_login("lena", "wrong")[0])


def test_with_the_directory_down_local_accounts_log_in_and_directory_users_are_told(settings, auth_ldap, local_user) -> None:  # noqa: ANN001
    _configure(settings, _environ(f"ldap://127.0.0.1:{directory.free_port()}"))
    client, response = _login("lena", "local-account-pw")
    assert response.status_code == 302 and _logged_in(client)
    client, response = _login("dora", directory.PASSWORDS["dora"])
    assert response.status_code == 200 and not _logged_in(client)
    assert "directory (LDAP) server could not be reached" in response.content.decode()
    assert not User.objects.filter(username="dora").exists()
    for _ in range(2):  # each such login counts as a failure: the third locks the username out
        _login("dora", directory.PASSWORDS["dora"])
    assert _login("dora", directory.PASSWORDS["dora"])[1].status_code == 429


@pytest.mark.parametrize("username", ["*)(uid=*", "*", "dora)(|(uid=*", "dora*", "uid=dora,ou=people,dc=example,dc=org"])
def test_filter_injection_in_the_username_is_refused(ldap_on, username: str) -> None:
    for password in (directory.PASSWORDS["dora"], "x"):
        client, response = _login(username, password)
        assert response.status_code == 200 and not _logged_in(client)
    assert not User.objects.exists()


def test_a_dn_template_works_as_the_search_does(settings, slapd_server) -> None:  # noqa: ANN001
    _configure(settings, _environ(slapd_server.uri, LDAP_USER_SEARCH_BASE="",
                                  LDAP_USER_DN_TEMPLATE=f"uid=%(user)s,{directory.PEOPLE}"))
    assert _logged_in(_login("dora", directory.PASSWORDS["dora"])[0])
    assert not _logged_in(_login("*)(uid=*", directory.PASSWORDS["dora"])[0])


def test_project_memberships_follow_ldap_groups(settings, slapd_server) -> None:  # noqa: ANN001
    from scheduler.projects import Membership, Project

    _configure(settings, _environ(slapd_server.uri, LDAP_PROJECT_GROUPS="true"))
    audio = Project.objects.create(name="audio")
    vision = Project.objects.create(name="vision")
    Project.objects.create(name="nlp")
    dora = User.objects.create(username="dora")
    Membership.objects.create(user=dora, project=audio, is_default=True)  # not an LDAP group of hers
    assert _logged_in(_login("dora", directory.PASSWORDS["dora"])[0])
    assert sorted(Membership.objects.filter(user=dora).values_list("project__name", flat=True)) == ["vision"]
    assert Group.objects.filter(name="vision").exists()  # the Django group is mirrored too
    assert vision.memberships.get().user == dora


def test_project_memberships_are_left_alone_unless_asked(ldap_on) -> None:
    from scheduler.projects import Membership, Project

    Project.objects.create(name="vision")
    assert _logged_in(_login("dora", directory.PASSWORDS["dora"])[0])
    assert not Membership.objects.exists()


def test_sync_keeps_the_default_flag_of_a_kept_membership(auth_ldap) -> None:  # noqa: ANN001
    from portal.ldap_backend import sync_project_memberships
    from scheduler.projects import Membership, Project

    user = User.objects.create(username="dora")
    vision = Project.objects.create(name="vision")
    Project.objects.create(name="nlp")
    Membership.objects.create(user=user, project=vision, is_default=True)
    assert sync_project_memberships(user, ["vision", "nlp", "no-such-project"]) == (["nlp"], [])
    assert Membership.objects.get(user=user, project=vision).is_default
    assert sync_project_memberships(user, []) == ([], ["nlp", "vision"])
    assert not Membership.objects.filter(user=user).exists()
