"""Move the job id sequence past every id a node agent may still run, after a database restore.

Agents know a job's attempt by ``(job id, attempt number)``. A restored
database forgets the jobs submitted after its backup, and its sequence would
hand their ids out again: a new job could then be taken for a process of the
forgotten one that an agent still runs (a launch it already runs is a
duplicate to the agent). Advancing the sequence well past the backup's last
id makes every id issued after the restore new to every agent; the
forgotten attempts are stopped as stale at their node's next heartbeat.

Workers also catch up by themselves (``scheduler/job_ids.py``) at the first
heartbeat that names an id this database has not issued, but jobs submitted
before that heartbeat could still collide: the restore runs this command
before the portal accepts jobs again.
"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connection

from scheduler.job_ids import DEFAULT_GAP, advance


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
