"""Move the job id sequence past every id a node agent may still run, after a database restore.

Agents know a job's attempt by ``(job id, attempt number)``. A restored
database forgets the jobs submitted after its backup, and its sequence would
hand their ids out again: a new job could then be taken for a process of the
forgotten one that an agent still runs (a launch it already runs is a
duplicate to the agent). Advancing the sequence well past the backup's last
id makes every id issued after the restore new to every agent; the
forgotten attempts are stopped as stale at their node's next heartbeat.
"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connection

from scheduler.models import Job

DEFAULT_GAP = 1_000_000


def advance(gap: int) -> int:
    """Set the job id sequence to ``max(highest id, sequence's last value) + gap``; return that value."""
    table = Job._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_get_serial_sequence(%s, 'id')", [table])
        sequence = cursor.fetchone()[0]
        cursor.execute(f"SELECT last_value FROM {sequence}")  # a name PostgreSQL gave, not input
        last_value = cursor.fetchone()[0]
        cursor.execute(f"SELECT COALESCE(MAX(id), 0) FROM {connection.ops.quote_name(table)}")
        highest = cursor.fetchone()[0]
        target = max(highest, last_value) + gap
        cursor.execute("SELECT setval(%s, %s)", [sequence, target])
    return target


class Command(BaseCommand):
    help = ("After restoring a backup: make new job ids start well past any id the backup did not know "
            "(docs/operations.md, Backup and restore).")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--gap", type=int, default=DEFAULT_GAP,
                            help=f"ids to skip; more than the jobs submitted since the backup (default {DEFAULT_GAP:,})")

    def handle(self, *args: object, **options: object) -> None:
        gap = options["gap"]
        if not isinstance(gap, int) or gap < 1:
            raise CommandError("--gap must be a positive number of ids")
        if connection.vendor != "postgresql":
            raise CommandError(f"advance_job_ids needs PostgreSQL, not {connection.vendor}")
        self.stdout.write(f"the next job id is above {advance(gap)}")
