"""Deleting the stored logs of attempts that ended long ago (``manage.py purge_job_logs``).

The portal keeps every streamed log batch (``scheduler.attempt_log``), up to 256 MiB per attempt
(the agent's ``--log-stream-limit``), and nothing else ever deletes them, so the database grows
with every job ever run. A site decides how long logs stay readable in the portal and runs the
command from cron. Each purged attempt keeps one row in place of its log (``purged``), saying when
it was deleted and where the whole file is (the node's copy is never touched); the attempt, its
job and their accounting stay. An attempt still running, or one that ended after the cutoff, is
left alone; running the command again changes nothing until more attempts pass the cutoff.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db import transaction
from django.db.models import Count, Exists, OuterRef, Sum
from django.db.models.functions import Length

from scheduler.attempt_log import AttemptLog
from scheduler.models import Attempt


@dataclass(frozen=True, slots=True)
class Purged:
    """What a purge deleted (or, in a dry run, would delete)."""

    attempts: int = 0
    rows: int = 0
    lines: int = 0
    characters: int = 0

    def __add__(self, other: Purged) -> Purged:
        return Purged(self.attempts + other.attempts, self.rows + other.rows, self.lines + other.lines,
                      self.characters + other.characters)


def purged_line(now: datetime, lines: int, job_id: int, attempt: int) -> str:
    """The line left in place of a purged log."""
    return (f"[portal] the {lines} stored line(s) of this log were deleted on {now:%Y-%m-%d} "
            f"(log retention); the whole log stays on the node that ran it, "
            f"jobs/{job_id}/attempt-{attempt}.log in its agent's work dir")


def purge_logs(ended_before: datetime, now: datetime, *, batch: int = 500, dry_run: bool = False) -> Purged:
    """Delete the stored logs of attempts that ended before ``ended_before``, ``batch`` attempts per
    transaction (so no one transaction holds a large share of the table); each keeps one row
    saying so. With ``dry_run``, count what would go and write nothing."""
    unpurged = AttemptLog.objects.filter(attempt=OuterRef("pk"), purged=False)
    candidates = (Attempt.objects.filter(ended_at__lt=ended_before).filter(Exists(unpurged))
                  .order_by("pk").values_list("pk", flat=True))
    total, after = Purged(), 0
    while True:
        ids = list(candidates.filter(pk__gt=after)[:batch])
        if not ids:
            return total
        after = ids[-1]
        total += _purge_batch(ids, now, dry_run)


def _purge_batch(attempt_ids: list[int], now: datetime, dry_run: bool) -> Purged:
    with transaction.atomic():
        rows = AttemptLog.objects.filter(attempt_id__in=attempt_ids, purged=False)
        per_attempt = {r["attempt_id"]: r for r in rows.values("attempt_id").annotate(
            rows=Count("id"), lines=Sum("line_count"), characters=Sum(Length("text")))}
        done = Purged(len(per_attempt), sum(r["rows"] for r in per_attempt.values()),
                      sum(r["lines"] or 0 for r in per_attempt.values()),
                      sum(r["characters"] or 0 for r in per_attempt.values()))
        if dry_run or not per_attempt:
            return done
        rows.delete()
        AttemptLog.objects.bulk_create(
            AttemptLog(attempt_id=pk, received_at=now, purged=True,
                       text=purged_line(now, per_attempt[pk]["lines"] or 0, job_id, number))
            for pk, job_id, number in Attempt.objects.filter(pk__in=per_attempt).values_list("pk", "job_id", "number"))
    return done
