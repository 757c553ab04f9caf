"""``manage.py demo_users``: a demo admin and a demo user for a local run.

Idempotent: each run makes sure both accounts exist with the passwords kept in
the credentials file (``var/demo-credentials.json`` unless ``--credentials``
says otherwise; created on the first run with random passwords, mode 0600),
makes sure the demo user has an active API token whose key is in that file,
and prints the credentials. Passwords can be fixed with ``DEMO_ADMIN_PASSWORD``
and ``DEMO_USER_PASSWORD``. Running it twice changes nothing and prints the
same credentials. Meant for a local demo machine only: the file holds the
plain passwords and token.
"""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction

from portal.models import ApiToken, hash_key

TOKEN_NAME = "demo-cli"


class Command(BaseCommand):
    help = "Create or refresh the demo admin and demo user and print their credentials."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--admin", default="admin", help="admin username (default: admin)")
        parser.add_argument("--user", default="demo", help="user username (default: demo)")
        parser.add_argument("--credentials", type=Path,
                            default=Path(settings.BASE_DIR) / "var" / "demo-credentials.json",
                            help="file that keeps the demo passwords and token")
        parser.add_argument("--url", default="http://127.0.0.1:8000",
                            help="portal URL printed in the CLI hint")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["admin"] == options["user"]:
            raise CommandError("--admin and --user must be different usernames")
        path: Path = options["credentials"]
        stored = _load(path)
        creds = {
            "admin": {"username": options["admin"],
                      "password": _password("DEMO_ADMIN_PASSWORD", stored, "admin", options["admin"])},
            "user": {"username": options["user"],
                     "password": _password("DEMO_USER_PASSWORD", stored, "user", options["user"])},
        }
        with transaction.atomic():
            _ensure_user(creds["admin"], staff=True)
            user = _ensure_user(creds["user"], staff=False)
            creds["token"] = _ensure_token(user, stored.get("token"))
        _save(path, creds)
        self.stdout.write(
            f"Demo admin: {creds['admin']['username']} / {creds['admin']['password']}\n"
            f"Demo user:  {creds['user']['username']} / {creds['user']['password']}\n"
            f"CLI as the demo user:\n"
            f"  export GPUSCHED_URL={options['url']} GPUSCHED_TOKEN={creds['token']}\n"
            f"(kept in {path})\n"
        )


def _load(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise CommandError(f"cannot read {path}: {exc}; delete it to start over") from None
    if not isinstance(data, dict):
        raise CommandError(f"{path} is not a JSON object; delete it to start over")
    return data


def _password(env_name: str, stored: dict[str, Any], role: str, username: str) -> str:
    """The environment's password, else the stored one for this username, else a new one."""
    if os.environ.get(env_name):
        return os.environ[env_name]
    previous = stored.get(role) or {}
    if previous.get("username") == username and previous.get("password"):
        return str(previous["password"])
    return secrets.token_urlsafe(12)


def _ensure_user(cred: dict[str, str], *, staff: bool):  # noqa: ANN202 - the user model
    user_model = get_user_model()
    user, _ = user_model.objects.get_or_create(username=cred["username"])
    user.is_staff = user.is_superuser = staff
    user.is_active = True
    if not user.check_password(cred["password"]):
        user.set_password(cred["password"])
    user.save()
    return user


def _ensure_token(user, key: str | None) -> str:  # noqa: ANN001 - the user model
    """Keep ``key`` if it is still an active token of ``user``; else issue a new one."""
    if key and ApiToken.objects.filter(user=user, key_hash=hash_key(key), revoked__isnull=True).exists():
        return key
    _, new_key = ApiToken.issue(user, TOKEN_NAME)
    return new_key


def _save(path: Path, creds: dict[str, Any]) -> None:
    """Write atomically with owner-only permissions."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        json.dump(creds, handle, indent=2)
    os.replace(tmp, path)
