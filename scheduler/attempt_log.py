"""An attempt's log as the portal stores it, and the two ways it is read without loading all of it.

The node streams each attempt's log in batches of lines (``cluster.agent.logstream``, which bounds
what it sends); each batch is one ``AttemptLog`` row. A chatty job's attempt has hundreds of
thousands of rows, so no read loads every row: a page's view reads the newest rows until it has
the lines it shows (``log_tail``), and the API pages through the log by line number
(``log_page``), finding the first row of a page from the rows' line counts without reading the
text before it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from django.db import models
from django.db.models import F, Max, Sum, Window
from django.utils import timezone


#: Rows read per query by the reads below.
READ_BATCH = 100


class AttemptLogQuerySet(models.QuerySet):
    def bulk_create(self, objs, *args, **kwargs):  # type: ignore[no-untyped-def]
        """As Django's, with each row's line count set (``save`` is not called for these)."""
        objs = list(objs)
        for row in objs:
            row.line_count = count_lines(row.text)
        return super().bulk_create(objs, *args, **kwargs)


class AttemptLog(models.Model):
    """A batch of log lines received from the node for one attempt (append-only)."""

    # No index of its own: the (attempt, id) index below serves every lookup by attempt.
    attempt = models.ForeignKey("scheduler.Attempt", on_delete=models.CASCADE, related_name="log_chunks",
                                db_index=False)
    received_at = models.DateTimeField(default=timezone.now)
    text = models.TextField(help_text="Lines joined by newlines, without a trailing newline.")
    line_count = models.PositiveIntegerField(default=0, help_text="Lines in text, set on save.")
    purged = models.BooleanField(
        default=False, help_text="Stands for the attempt's log, deleted by log retention (scheduler/log_retention.py).")

    objects = AttemptLogQuerySet.as_manager()

    class Meta:
        ordering = ["attempt_id", "id"]
        # An attempt's batches in order, newest first or from a line on, without sorting them all; with
        # the line counts, so a log's total and the running sum that finds a page's first row read the
        # index alone (once vacuum has marked the rows visible), not every row's text page.
        indexes = [models.Index(fields=["attempt", "id"], include=["line_count"], name="attemptlog_attempt_lines")]

    def save(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        self.line_count = count_lines(self.text)
        super().save(*args, **kwargs)

    def __str__(self) -> str:
        return f"log of attempt {self.attempt_id}"


def count_lines(text: str) -> int:
    """Lines in a stored batch: its text split at newlines (an empty batch is one empty line)."""
    return text.count("\n") + 1


@dataclass(frozen=True, slots=True)
class LogTail:
    """The last lines of a log (or of what was stored after a row): ``lines``, the id of the newest
    row read (``after`` when nothing is new) and whether earlier lines were left out."""

    lines: list[str]
    last_id: int | None
    truncated: bool


def _in_order(rows: models.QuerySet, *fields: str, newest_first: bool = False) -> Iterator[tuple]:
    """``(id, *fields)`` of ``rows`` in id order (newest first if asked), ``READ_BATCH`` rows per
    query: keyset pagination on the attempt-and-id index. (A server-side cursor outside a
    transaction is declared WITH HOLD, and PostgreSQL would copy every row of the query before
    handing out the first.)"""
    order, beyond = ("-id", "id__lt") if newest_first else ("id", "id__gt")
    page = rows
    while True:
        batch = list(page.order_by(order).values_list("id", *fields)[:READ_BATCH])
        yield from batch
        if len(batch) < READ_BATCH:
            return
        page = rows.filter(**{beyond: batch[-1][0]})


def log_tail(attempt_pk: int, limit: int, after_id: int | None = None) -> LogTail:
    """At most the last ``limit`` lines of the attempt's log, of the rows after ``after_id`` when
    given; rows are read newest first and only until ``limit`` lines are in hand."""
    rows = AttemptLog.objects.filter(attempt_id=attempt_pk)
    if after_id is not None:
        rows = rows.filter(id__gt=after_id)
    texts: list[str] = []
    last_id, held, truncated = after_id, 0, False
    for row_id, text in _in_order(rows, "text", newest_first=True):
        if held >= limit:
            truncated = True
            break
        if not texts:
            last_id = row_id
        texts.append(text)
        held += count_lines(text)
    lines = [line for text in reversed(texts) for line in text.split("\n")]
    if len(lines) > limit:
        lines, truncated = lines[-limit:], True
    return LogTail(lines, last_id, truncated)


@dataclass(frozen=True, slots=True)
class LogPage:
    """Lines ``offset`` to ``offset + len(lines)`` of a log of ``total`` lines."""

    offset: int
    lines: list[str]
    total: int

    @property
    def next_offset(self) -> int:
        return self.offset + len(self.lines)

    @property
    def more(self) -> bool:
        return self.next_offset < self.total


def log_page(attempt_pk: int, offset: int, limit: int, *, tail: int | None = None) -> LogPage:
    """Lines ``offset`` .. ``offset + limit`` of the attempt's log (fewer at its end); with ``tail``,
    the page that starts at its last ``tail`` lines instead. The row holding the first line is found
    from the rows' line counts (a running sum in PostgreSQL), not by reading the text before it; the
    page's rows are then read in order. Rows stored while this runs come after the page's start."""
    rows = AttemptLog.objects.filter(attempt_id=attempt_pk)
    stored = rows.aggregate(total=Sum("line_count"), last=Max("id"))
    total = stored["total"] or 0
    if tail is not None:
        offset = max(0, total - tail)
    found = _row_holding(rows.filter(id__lte=stored["last"]), offset, total) if offset < total and limit > 0 else None
    if found is None:
        return LogPage(offset, [], total)
    first_id, skip = found
    lines: list[str] = []
    for _, text in _in_order(rows.filter(id__gte=first_id), "text"):
        lines.extend(text.split("\n")[skip:skip + limit - len(lines)])
        skip = 0
        if len(lines) >= limit:
            break
    return LogPage(offset, lines, total)


def _row_holding(rows: models.QuerySet, offset: int, total: int) -> tuple[int, int] | None:
    """The id of the row that holds line ``offset`` of ``rows`` (``total`` lines) and that line's
    index in it; None if the rows are gone (deleted by log retention meanwhile).

    A running sum of line counts, from the nearer end: PostgreSQL computes it row by row along the
    attempt-and-id index and stops at the first row that reaches ``offset``, so a poll near the end
    of a long log (``gpusched logs --follow``) adds up the last rows, not all of them."""
    if offset < total // 2:
        upto = rows.annotate(upto=Window(Sum("line_count"), order_by=F("id").asc()))
        found = upto.filter(upto__gt=offset).order_by("id").values_list("id", "upto", "line_count").first()
        return None if found is None else (found[0], offset - (found[1] - found[2]))
    wanted = total - offset  # lines from line ``offset`` to the end
    rest = rows.annotate(rest=Window(Sum("line_count"), order_by=F("id").desc()))
    found = rest.filter(rest__gte=wanted).order_by("-id").values_list("id", "rest").first()
    return None if found is None else (found[0], found[1] - wanted)
