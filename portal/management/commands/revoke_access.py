"""Cut a user off at once: end every session, revoke every API token, optionally deactivate."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from portal import access


class Command(BaseCommand):
    help = "End all of USER's sessions and revoke all of USER's API tokens (--deactivate: also block new logins)."

    def add_arguments(self, parser) -> None:  # noqa: ANN001
        parser.add_argument("username")
        parser.add_argument("--deactivate", action="store_true", help="also mark the account inactive")

    def handle(self, *args: object, username: str, deactivate: bool, **options: object) -> None:
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"no user named {username!r}")
        result = access.revoke_access(user, deactivate=deactivate)
        self.stdout.write(f"{username}: {result.sessions} session(s) ended, {result.tokens} token(s) revoked"
                          + (", account deactivated" if deactivate else ""))
