"""``gpusched logs``: an attempt's log, a page at a time, from its start or its last lines, and
followed while the job runs."""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Mapping
from typing import Any, TextIO

from portal.cli.client import ApiClient
from portal.cli.output import dump_json

# States a job never leaves: scheduler.models.TERMINAL_STATES, restated here
# because the client imports no Django (a test keeps the two equal).
FINAL_STATES = frozenset({"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"})


def cmd_logs(client: ApiClient, args: argparse.Namespace, out: TextIO) -> int:
    """Print an attempt's log (the latest, or ``--attempt N``).

    The log comes a page at a time (the API's ``limit``), each page printed as
    it arrives; ``--tail N`` starts at the last N lines. With ``--follow``,
    poll and print only new lines (the API's ``offset``) until the job reaches
    a final state. A requeued job's later attempts are printed in turn, each
    after a ``--- attempt N ---`` line; with ``--attempt N`` it stops once a
    later attempt exists. The job is read *before* each log fetch, so the
    fetch after a final state is complete.
    """
    if not args.follow:
        return _print_whole_log(client, args, out)
    printer = _LogPrinter(out, as_json=args.json)
    attempt, shown, tail = args.attempt, 0, args.tail
    while True:
        job = client.get_job(args.job_id)
        body = client.job_logs(args.job_id, attempt, offset=shown, tail=tail)
        printer.show(body)
        attempt, tail = body.get("attempt"), None
        shown = _next_offset(body)
        if body.get("more"):
            continue  # the rest of a long log, without waiting
        latest = job.get("attempt_count") or 0
        if attempt is not None and latest > attempt:
            if args.attempt is not None:
                return 0  # the attempt asked for is over
            attempt, shown = attempt + 1, 0  # drain the next attempt without waiting
            continue
        if job.get("state") in FINAL_STATES:
            return 0
        time.sleep(args.interval)


def _next_offset(body: Mapping[str, Any]) -> int:
    """Where the lines after ``body``'s start (a server before paging sent no ``next_offset``)."""
    if "next_offset" in body:
        return int(body["next_offset"])
    return int(body.get("offset") or 0) + len(body.get("lines") or [])


def _print_whole_log(client: ApiClient, args: argparse.Namespace, out: TextIO) -> int:
    """The attempt's log (from its last ``--tail`` lines), page after page; as one JSON body with ``--json``."""
    body = client.job_logs(args.job_id, args.attempt, tail=args.tail)
    attempt, first, lines = body.get("attempt"), body.get("offset", 0), list(body.get("lines") or [])
    if not args.json:
        out.writelines(f"{line}\n" for line in lines)
    while body.get("more"):
        body = client.job_logs(args.job_id, attempt, offset=_next_offset(body))
        page = body.get("lines") or []
        if args.json:
            lines.extend(page)
        else:
            out.writelines(f"{line}\n" for line in page)
    if args.json:
        dump_json({**body, "attempt": attempt, "offset": first, "lines": lines}, out)
    return 0


class _LogPrinter:
    """Prints log bodies; a header line marks a change to another attempt."""

    def __init__(self, out: TextIO, *, as_json: bool) -> None:
        self.out = out
        self.as_json = as_json
        self.attempt: Any = None

    def show(self, body: Mapping[str, Any]) -> None:
        attempt, lines = body.get("attempt"), list(body.get("lines") or [])
        if self.as_json:
            if lines or attempt != self.attempt:
                self.out.write(json.dumps({"attempt": attempt, "lines": lines}) + "\n")
        else:
            if attempt != self.attempt and self.attempt is not None:
                self.out.write(f"--- attempt {attempt} ---\n")
            self.out.writelines(f"{line}\n" for line in lines)
        self.attempt = attempt
        self.out.flush()
