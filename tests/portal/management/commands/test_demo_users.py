"""``manage.py demo_users``: accounts, token and printed credentials, idempotently."""

from __future__ import annotations

import io
import json
import stat
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command

from portal.models import ApiToken, hash_key

pytestmark = pytest.mark.django_db


def run(path: Path, *extra: str) -> str:
    out = io.StringIO()
    call_command("demo_users", "--credentials", str(path), *extra, stdout=out)
    return out.getvalue()


def test_creates_admin_and_user_with_working_passwords_and_token(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("DEMO_ADMIN_PASSWORD", raising=False)
    monkeypatch.delenv("DEMO_USER_PASSWORD", raising=False)
    path = tmp_path / "creds.json"
    output = run(path)
    creds = json.loads(path.read_text())
    users = get_user_model().objects
    admin, demo = users.get(username="admin"), users.get(username="demo")
    assert admin.is_staff and admin.is_superuser and admin.check_password(creds["admin"]["password"])
    assert not demo.is_staff and demo.check_password(creds["user"]["password"])
    token = ApiToken.objects.get(key_hash=hash_key(creds["token"]))
    assert token.user == demo and token.is_active
    assert f"Demo admin: admin / {creds['admin']['password']}" in output
    assert f"GPUSCHED_TOKEN={creds['token']}" in output
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_second_run_changes_nothing_and_prints_the_same(tmp_path: Path) -> None:
    path = tmp_path / "creds.json"
    first = run(path)
    second = run(path)
    assert first == second
    assert get_user_model().objects.count() == 2
    assert ApiToken.objects.count() == 1


def test_revoked_token_is_replaced_and_changed_password_restored(tmp_path: Path) -> None:
    path = tmp_path / "creds.json"
    run(path)
    creds = json.loads(path.read_text())
    ApiToken.objects.update(revoked="2025-01-01T00:00:00Z")
    demo = get_user_model().objects.get(username="demo")
    demo.set_password("changed-by-someone")
    demo.save()
    run(path)
    new = json.loads(path.read_text())
    assert new["token"] != creds["token"]
    assert ApiToken.objects.get(key_hash=hash_key(new["token"])).is_active
    demo.refresh_from_db()
    assert demo.check_password(creds["user"]["password"])


def test_passwords_from_environment(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("DEMO_ADMIN_PASSWORD", "admin-pass-123")
    monkeypatch.setenv("DEMO_USER_PASSWORD", "user-pass-456")
    run(tmp_path / "creds.json", "--admin", "boss", "--user", "ann")
    users = get_user_model().objects
    assert users.get(username="boss").check_password("admin-pass-123")
    assert users.get(username="ann").check_password("user-pass-456")


def test_corrupt_credentials_file_is_an_error_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "creds.json"
    path.write_text("{not json")
    with pytest.raises(CommandError, match=f"cannot read {path}"):
        run(path)
    assert get_user_model().objects.count() == 0
