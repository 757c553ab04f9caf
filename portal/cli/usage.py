"""``gpusched usage``: GPU-hours, jobs, preemptions and lost GPU-hours by project or user and class
(GET /api/v1/usage/), as a table, CSV or the API's JSON; ``gpusched share``: each project's
fair-share standing now (GET /api/v1/fairshare/), like Slurm's ``sshare``."""

from __future__ import annotations

import argparse
import csv
from typing import Any, TextIO

from portal.cli.client import ApiClient
from portal.cli.output import Column, dump_json, local_time, render_table

NUMBERS = ("gpu_hours", "jobs", "preemptions", "lost_gpu_hours")


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    """Register ``usage`` on the subcommands ``sub``."""
    usage = sub.add_parser("usage", parents=[common], help="GPU-hours, jobs and preemptions by project or user")
    usage.add_argument("--from", dest="start", metavar="DATE",
                       help="start: YYYY-MM-DD (midnight UTC) or an ISO date-time (default: 7 days before --to)")
    usage.add_argument("--to", dest="end", metavar="DATE",
                       help="end: YYYY-MM-DD (that day included) or an ISO date-time (default: now)")
    usage.add_argument("--by", choices=["project", "user"], default="project", help="group by (default: project)")
    usage.add_argument("--csv", action="store_true", help="print CSV (the portal's CSV download) instead of a table")
    sub.add_parser("share", parents=[common], help="fair share: each project's share, usage, factor and GPUs")


def cmd_usage(client: ApiClient, args: argparse.Namespace, out: TextIO) -> int:
    params = {"by": args.by, **({"from": args.start} if args.start else {}), **({"to": args.end} if args.end else {})}
    body = client.usage(params)
    if args.json:
        dump_json(body, out)
        return 0
    by = body["by"]
    if args.csv:
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow((by, "job_class", *NUMBERS))
        for row in body["rows"]:
            writer.writerow((row[by], row["job_class"], *(row[k] for k in NUMBERS)))
        return 0
    beside = body.get("beside", {})
    columns: list[Column] = [
        (by.upper(), lambda r: r[by]), ("CLASS", lambda r: r["job_class"]),
        ("GPU-HOURS", lambda r: round(r["gpu_hours"], 2)), ("JOBS", lambda r: r["jobs"]),
        ("PREEMPTIONS", lambda r: r["preemptions"]), ("LOST GPU-HOURS", lambda r: round(r["lost_gpu_hours"], 2)),
        ("SHARE" if by == "project" else "BUDGET", lambda r: _beside(beside.get(r[by], {}))),
    ]
    out.write(f"Usage from {local_time(body['from'])} to {local_time(body['to'])} by {by}\n")
    out.write(render_table(columns, body["rows"]) + "\n")
    totals = body["totals"]
    out.write(f"Total: {totals['gpu_hours']:.2f} GPU-hours, {_counted(totals['jobs'], 'job')}, "
              f"{_counted(totals['preemptions'], 'preemption')}, {totals['lost_gpu_hours']:.2f} GPU-hours lost\n")
    return 0


def short_duration(seconds: float) -> str:
    """In the largest unit it makes at least one of, to three significant digits: ``600`` -> ``10 min``,
    ``5400`` -> ``1.5 h``, ``604800`` -> ``7 d``, ``45`` -> ``45 s``."""
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.3g} {unit}"
    return f"{seconds:.3g} s"


def _counted(count: int, noun: str) -> str:
    """``1 job``, ``2 jobs``."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def _beside(configured: dict) -> Any:
    """A project's share, or a user's GPU-hour budget over its period; None when nothing is set."""
    if "share" in configured:
        return configured["share"]
    if configured.get("gpu_hours_budget") is not None:
        return f"{configured['gpu_hours_budget']:g}/{configured['budget_period_days']}d"
    return None


def cmd_share(client: ApiClient, args: argparse.Namespace, out: TextIO) -> int:
    body = client.fair_share()
    if args.json:
        dump_json(body, out)
        return 0
    state = "on" if body["enabled"] else "off (the figures say how it would weigh the projects)"
    out.write(f"Fair share {state}; usage half-life {short_duration(body['half_life_s'])}; "
              f"{body['total_gpus']} GPUs up\n")
    columns: list[Column] = [
        ("PROJECT", lambda r: r["project"]), ("SHARE", lambda r: r["share"]),
        ("NORM SHARE", lambda r: round(r["share_norm"], 3)),
        ("USAGE GPU-H", lambda r: round(r["usage_gpu_hours"], 2)), ("NORM USAGE", lambda r: round(r["usage_norm"], 3)),
        ("YOURS GPU-H", lambda r: round(r["your_usage_gpu_hours"], 2)),
        ("FACTOR", lambda r: round(r["fair_share_factor"], 3)),
        ("HELD", lambda r: r["held_gpus"]), ("WANTED", lambda r: r["wanted_gpus"]),
        ("ENTITLED", lambda r: round(r["entitled_gpus"], 1)),
    ]
    if not body["rows"]:
        out.write("No project of yours holds, wants or has used GPUs.\n")
        return 0
    out.write(render_table(columns, body["rows"]) + "\n")
    return 0
