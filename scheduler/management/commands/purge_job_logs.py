"""Delete the stored logs of attempts that ended more than N days ago (docs/operations.md, "Log retention")."""

from __future__ import annotations

from datetime import timedelta

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from scheduler.log_retention import purge_logs


class Command(BaseCommand):
    help = ("Delete the logs the portal stores for attempts that ended more than --days days ago; each keeps "
            "one line saying so, and the nodes keep their files (docs/operations.md, Log retention).")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--days", type=int, required=True, help="keep the logs of attempts that ended within this many days")
        parser.add_argument("--batch", type=int, default=500, help="attempts per transaction (default 500)")
        parser.add_argument("--dry-run", action="store_true", help="say what would be deleted, delete nothing")

    def handle(self, *args: object, **options: object) -> None:
        days, batch = options["days"], options["batch"]
        if not isinstance(days, int) or days < 1:
            raise CommandError(f"--days must be a whole number of days >= 1, got {days}")
        if not isinstance(batch, int) or batch < 1:
            raise CommandError(f"--batch must be >= 1, got {batch}")
        now = timezone.now()
        done = purge_logs(now - timedelta(days=days), now, batch=batch, dry_run=bool(options["dry_run"]))
        verb = "would delete" if options["dry_run"] else "deleted"
        self.stdout.write(f"{verb} the stored logs of {done.attempts} attempt(s) that ended more than {days} day(s) "
                          f"ago: {done.rows} batch(es), {done.lines} line(s), {done.characters} character(s)")
