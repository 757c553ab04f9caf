"""An attempt's log as the portal stores it, and the two ways it is read without loading all of it.

The node streams each attempt's log in batches of lines (``cluster.agent.logstream``, which bounds
what it sends); each batch is one ``AttemptLog`` row. A chatty job's attempt has hundreds of
thousands of rows, so no read loads every row: a page's view reads the newest rows until it has
the lines it shows (``log_tail``), and the API pages through the log by line number
(``log_page``), finding the first row of a page from the rows' line counts without reading the
text before it.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db import models
from django.db.models import F, Sum, Window
from django.utils import timezone


class AttemptLogQuerySet(models.QuerySet):
    def bulk_create(self, objs, *args, **kwargs):  # type: ignore[no-untyped-def]
        """As Django's, with each row's line count set (``save`` is not called for these)."""
        objs = list(objs)
        for row in objs:
            row.line_count = count_lines(row.text)
        return super().bulk_create(objs, *args, **kwargs)


class AttemptLog(models.Model):
    """A batch of log lines received from the node for one attempt (append-only)."""

    attempt = models.ForeignKey("scheduler.Attempt", on_delete=models.CASCADE, related_name="log_chunks")
    received_at = models.DateTimeField(default=timezone.now)
    text = models.TextField(help_text="Lines joined by newlines, without a trailing newline.")
    line_count = models.PositiveIntegerField(default=0, help_text="Lines in text, set on save.")
    purged = models.BooleanField(
        default=False, help_text="Stands for the attempt's log, deleted by log retention (scheduler/log_retention.py).")

    objects = AttemptLogQuerySet.as_manager()

    class Meta:
        ordering = ["attempt_id", "id"]

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


def log_tail(attempt_pk: int, limit: int, after_id: int | None = None) -> LogTail:
    """At most the last ``limit`` lines of the attempt's log, of the rows after ``after_id`` when
    given; rows are read newest first and only until ``limit`` lines are in hand."""
    rows = AttemptLog.objects.filter(attempt_id=attempt_pk)
    if after_id is not None:
        rows = rows.filter(id__gt=after_id)
    texts: list[str] = []
    last_id, held, truncated = after_id, 0, False
    for row_id, text in rows.order_by("-id").values_list("id", "text").iterator(chunk_size=100):
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


def log_page(attempt_pk: int, offset: int, limit: int) -> LogPage:
    """Lines ``offset`` .. ``offset + limit`` of the attempt's log (fewer at its end). The rows
    before the page are skipped by their line counts (a running sum in PostgreSQL), not read."""
    rows = AttemptLog.objects.filter(attempt_id=attempt_pk)
    total = rows.aggregate(n=Sum("line_count"))["n"] or 0
    if offset >= total or limit <= 0:
        return LogPage(offset, [], total)
    ends = rows.annotate(ends_at=Window(Sum("line_count"), order_by=F("id").asc())).order_by("id")
    lines: list[str] = []
    for text, ends_at, count in ends.filter(ends_at__gt=offset).values_list(
            "text", "ends_at", "line_count").iterator(chunk_size=100):
        split = text.split("\n")
        first = max(0, offset - (ends_at - count))
        lines.extend(split[first:first + limit - len(lines)])
        if len(lines) >= limit:
            break
    return LogPage(offset, lines, total)


def log_tail_page(attempt_pk: int, tail: int, limit: int) -> LogPage:
    """The page of at most ``limit`` lines that starts at the attempt's last ``tail`` lines."""
    total = AttemptLog.objects.filter(attempt_id=attempt_pk).aggregate(n=Sum("line_count"))["n"] or 0
    return log_page(attempt_pk, max(0, total - tail), limit)
