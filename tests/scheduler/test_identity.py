"""POSIX identities: the name syntax, the default from the username, an admin's explicit name,
and single-user mode."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError

from scheduler.identity import IdentityMissing, PosixIdentity, posix_name_problem, run_as_for


@pytest.mark.parametrize("name", ["alice", "_svc", "a", "bob.smith", "j-doe_2", "x" * 32])
def test_acceptable_posix_names(name: str) -> None:
    assert posix_name_problem(name) is None


@pytest.mark.parametrize("name, says", [
    ("", "empty"),
    ("x" * 33, "at most 32"),
    ("Alice", "not a POSIX user name"),
    ("alice@example.org", "not a POSIX user name"),
    ("1alice", "not a POSIX user name"),
    ("-alice", "not a POSIX user name"),
    (".alice", "not a POSIX user name"),
    ("al ice", "not a POSIX user name"),
    ("al;ice", "not a POSIX user name"),
    ("alice\n", "not a POSIX user name"),
    ("root", "superuser"),
])
def test_unacceptable_posix_names_say_why(name: str, says: str) -> None:
    assert says in posix_name_problem(name)


@pytest.mark.django_db
def test_the_username_is_the_default_identity() -> None:
    assert run_as_for(User.objects.create_user("alice")) == "alice"


@pytest.mark.django_db
def test_an_explicit_identity_wins_over_the_username() -> None:
    user = User.objects.create_user("alice")
    PosixIdentity.objects.create(user=user, posix_name="asmith")
    assert run_as_for(user) == "asmith"


@pytest.mark.django_db
def test_a_username_that_is_no_posix_name_needs_an_identity() -> None:
    user = User.objects.create_user("Alice@Example.org")
    with pytest.raises(IdentityMissing, match="no POSIX identity.*Ask an administrator"):
        run_as_for(user)
    PosixIdentity.objects.create(user=user, posix_name="alice")
    assert run_as_for(user) == "alice"


@pytest.mark.django_db
def test_a_stored_identity_that_became_unusable_is_refused_not_replaced_by_the_username() -> None:
    user = User.objects.create_user("alice")
    PosixIdentity.objects.create(user=user, posix_name="root")  # a row written around the validator
    with pytest.raises(IdentityMissing, match="'root' is not usable"):
        run_as_for(user)


@pytest.mark.django_db
def test_the_model_validates_the_name() -> None:
    identity = PosixIdentity(user=User.objects.create_user("alice"), posix_name="Bad Name")
    with pytest.raises(ValidationError) as caught:
        identity.full_clean()
    assert "posix_name" in caught.value.message_dict


@pytest.mark.django_db
def test_single_user_mode_runs_everyone_as_the_agent(settings) -> None:
    settings.GPUSCHED_SINGLE_USER = True
    assert run_as_for(User.objects.create_user("not a posix name")) == ""




@pytest.mark.django_db
@pytest.mark.parametrize("stored, expected", [("asmith", "asmith"), (None, "alice")])
def test_a_user_read_with_its_identity_needs_no_query(stored, expected, django_assert_num_queries) -> None:
    user = User.objects.create_user("alice")
    if stored:
        PosixIdentity.objects.create(user=user, posix_name=stored)
    read = User.objects.select_related("posix_identity").get(pk=user.pk)
    with django_assert_num_queries(0):
        assert run_as_for(read) == expected


@pytest.mark.django_db
def test_an_unusable_identity_read_with_the_user_is_still_refused() -> None:
    user = User.objects.create_user("alice")
    PosixIdentity.objects.create(user=user, posix_name="root")
    with pytest.raises(IdentityMissing, match="'root' is not usable"):
        run_as_for(User.objects.select_related("posix_identity").get(pk=user.pk))
