"""The ``gpusched`` subcommands: each takes the parsed arguments, calls the API
through :class:`ApiClient`, writes its result to ``out`` and returns the exit
status. API failures propagate as :class:`ApiError` (the caller prints them).
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
from collections.abc import Callable, Mapping
from typing import Any, TextIO

from portal.cli.client import ApiClient, ApiError
from portal.cli.logs import cmd_logs
from portal.cli.output import (Column, dump_json, forecast_start, format_quota, job_ref, job_reason, key_values,
                               local_time, memory, node_messages, queue_order, render_table, seconds, tenths,
                               truncate)
from portal.cli.progress import format_progress
from portal.cli.sessions import cmd_session
from portal.cli.usage import cmd_share, cmd_usage

_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=.*")
_LAUNCHERS = frozenset({"python", "python3", "bash", "sh", "torchrun", "accelerate", "deepspeed"})
_SCRIPT_SUFFIXES = (".py", ".sh", ".bash")

Handler = Callable[[ApiClient, argparse.Namespace, TextIO], int]

JOB_COLUMNS: list[Column] = [
    ("ID", job_ref),
    ("NAME", lambda j: truncate(j.get("name"))),
    ("OWNER", lambda j: j.get("owner")),
    ("CLASS", lambda j: j.get("job_class")),
    ("GPUS", lambda j: j.get("num_gpus")),
    ("PRIO", lambda j: j.get("priority")),
    ("STATE", lambda j: j.get("state")),
    ("REASON", lambda j: job_reason(j, with_message=False)),
    ("POS", lambda j: (j.get("forecast") or {}).get("position")),
    ("SUBMITTED", lambda j: local_time(j.get("submitted_at"))),
]

#: ``list --start`` (as ``squeue --start``): pending jobs, queue position, forecast start, reason.
START_COLUMNS: list[Column] = [*JOB_COLUMNS[:5], JOB_COLUMNS[8], ("START_TIME", lambda j: forecast_start(
    j.get("forecast"))), JOB_COLUMNS[7]]

ATTEMPT_COLUMNS: list[Column] = [
    ("#", lambda a: a.get("number")),
    ("NODES", lambda a: a.get("node_names")),
    ("GPUS", lambda a: a.get("gpu_indices")),
    ("STARTED", lambda a: local_time(a.get("started_at"))),
    ("ENDED", lambda a: local_time(a.get("ended_at"))),
    ("OUTCOME", lambda a: a.get("outcome")),
    ("EXIT", lambda a: a.get("exit_code")),
    ("SIGNAL", lambda a: a.get("signal")),
    ("CHECKPOINTED", lambda a: "in-grace" if a.get("checkpointed") and a.get("checkpoint_marker") is False
     else a.get("checkpointed")),
    ("LOST_GPU_S", lambda a: tenths(a.get("lost_gpu_seconds"))),
    ("PEAK_MEM", lambda a: memory(a.get("peak_mem_bytes"))), ("CPU_S", lambda a: tenths(a.get("cpu_seconds"))),
]

PLAN_COLUMNS: list[Column] = [
    ("#", lambda a: a.get("number")),
    ("PLAN", lambda a: a.get("plan")),
    ("GPUS", lambda a: a.get("gpu_count")),
    ("ACCUM", lambda a: a.get("grad_accum_steps")),
    ("ENDED", lambda a: "reconfigured" if a.get("notice_reason") == "reconfigure" else a.get("outcome")),
]

EVENT_COLUMNS: list[Column] = [
    ("AT", lambda e: local_time(e.get("at"))),
    ("STATE", lambda e: e.get("state")),
    ("REASON", lambda e: e.get("reason")),
    ("MESSAGE", lambda e: e.get("message")),
]


# -- submit -------------------------------------------------------------------

def build_submission(args: argparse.Namespace) -> dict[str, Any]:
    """The POST /jobs/ body for ``gpusched submit``; only given options are sent,
    so the portal's defaults apply to the rest.
    """
    command = args.command_text if args.command_text is not None else shlex.join(args.command_words)
    payload: dict[str, Any] = {"name": args.name or default_job_name(command), "command": command}
    optional = {
        "job_class": args.job_class,
        "num_gpus": args.gpus,
        "num_cpus": args.cpus,
        "mem_gb": args.mem,
        "grace_period": args.grace,
        "time_limit": args.time_limit,
        "priority": args.priority,
        "model": getattr(args, "model", None),
        "plan": getattr(args, "plan", None),
        "allowed_plans": getattr(args, "allowed_plans", None),
        "min_gpus": getattr(args, "min_gpus", None),
        "max_gpus": getattr(args, "max_gpus", None),
        "guaranteed": getattr(args, "guaranteed", None), "adaptive_app": getattr(args, "adaptive_app", None),
        "image": getattr(args, "image", None),
        "project": getattr(args, "project", None), "dependency": getattr(args, "dependency", None),
    }
    payload.update({k: v for k, v in optional.items() if v is not None})
    return payload


def default_job_name(command: str) -> str:
    """Like sbatch: the script's base name for interpreters and launchers
    (``python train.py`` -> ``train.py``, ``python -m pkg.train`` -> ``pkg.train``),
    otherwise the program's base name; ``job`` when nothing fits.
    """
    try:
        words = shlex.split(command)
    except ValueError:  # unbalanced quotes: the portal will judge the command
        words = command.split()
    while words and _ASSIGNMENT.fullmatch(words[0]):  # leading VAR=value settings
        words.pop(0)
    if not words:
        return "job"
    program = os.path.basename(words[0])
    if program.rstrip("0123456789.") in _LAUNCHERS:
        args = words[1:]
        if "-m" in args[:-1]:
            return args[args.index("-m") + 1][:100]
        script = next((w for w in args if w.endswith(_SCRIPT_SUFFIXES)), None)
        if script:
            return os.path.basename(script)[:100]
    return program[:100] or "job"


def cmd_submit(client: ApiClient, args: argparse.Namespace, out: TextIO) -> int:
    if getattr(args, "array", None) is not None:
        return _submit_array(client, args, out)
    job = client.submit_job(build_submission(args))
    if args.json:
        dump_json(job, out)
    elif args.quiet:
        out.write(f"{job.get('id')}\n")
    else:
        out.write(f"Submitted job {job.get('id')} ({job.get('name')}): {job.get('state')}\n")
    return 0


def _submit_array(client: ApiClient, args: argparse.Namespace, out: TextIO) -> int:
    jobs = client.submit_array([build_submission(args)], array=args.array)
    if args.json:
        dump_json(jobs, out)
    elif args.quiet:
        out.write("".join(f"{job.get('id')}\n" for job in jobs))
    else:
        out.write(f"Submitted job array {jobs[0].get('array_id')} of {len(jobs)} tasks "
                  f"({jobs[0].get('array_id')}_{jobs[0].get('array_index')}..{jobs[-1].get('array_id')}_"
                  f"{jobs[-1].get('array_index')}): {jobs[0].get('state')}\n")
    return 0


# -- list ---------------------------------------------------------------------

def cmd_list(client: ApiClient, args: argparse.Namespace, out: TextIO) -> int:
    start = getattr(args, "start", False)
    filters = {"state": args.state or ("PENDING" if start else None), "job_class": args.job_class,
               "array": str(args.array) if getattr(args, "array", None) else None,
               "from": getattr(args, "active_from", None), "to": getattr(args, "active_to", None),
               "owner": getattr(args, "user", None)}
    if args.all_pages:
        jobs: list[dict[str, Any]] = []
        count = 0
        for body in client.iter_jobs(start_page=args.page, **filters):
            jobs.extend(body.get("results", []))
            count = body.get("count", len(jobs))
        body = {"count": count, "next": None, "previous": None, "results": jobs}
    else:
        body = client.list_jobs(page=args.page, **filters)
    if args.json:
        dump_json(body, out)
        return 0
    jobs = body.get("results", [])
    out.write(render_table(START_COLUMNS if start else JOB_COLUMNS, jobs) + "\n")
    if body.get("next"):
        out.write(f"(page {args.page}: {len(jobs)} of {body.get('count')} jobs; "
                  f"--page {args.page + 1} or --all-pages for more)\n")
    return 0


# -- show ---------------------------------------------------------------------

def cmd_show(client: ApiClient, args: argparse.Namespace, out: TextIO) -> int:
    job = client.get_job(args.job_id)
    job = {**job, "progress": client.job_progress(args.job_id)}
    if args.json:
        dump_json(job, out)
        return 0
    out.write(format_job(job) + "\n")
    return 0


#: How ``show`` writes a CPU or memory request of 0 (no limit is set on the job).
NOT_LIMITED = "not limited"


def format_job(job: Mapping[str, Any]) -> str:
    """The human view of one job: fields, then attempts and the state timeline."""
    fields = [
        ("Job", job.get("id")),
        ("Name", job.get("name")),
        ("Owner", job.get("owner")),
        ("State", job.get("state")),
        ("Hold", job.get("hold") or None),
        ("Reason", job_reason(job)),
        ("Position", (job.get("forecast") or {}).get("position")),
        ("Starts at", forecast_start(job.get("forecast"))),
        ("Queue order", queue_order(job.get("priority_factors"))),
        ("Class", job.get("job_class")),
        ("GPUs", job.get("num_gpus")),
        ("CPUs", job.get("num_cpus") or NOT_LIMITED),  # 0: the job asked for no CPU or memory limit
        ("Memory (GB)", job.get("mem_gb") or NOT_LIMITED),
        ("Grace period", seconds(job.get("grace_period"))),
        ("Time limit", seconds(job.get("time_limit"))),
        ("Priority", job.get("priority")), ("Project", job.get("project")), ("Dependency", job.get("dependency") or None),
        ("Runs as", job.get("run_as") or None), ("Image", job.get("image")),
        ("Command", job.get("command")),
        ("Submitted", local_time(job.get("submitted_at"))),
        ("First started", local_time(job.get("first_started_at"))),
        ("Started", local_time(job.get("started_at"))),
        ("Ended", local_time(job.get("ended_at"))),
        ("Exit code", job.get("exit_code")),
        ("Attempts", job.get("attempt_count")),
        ("Preemptions", job.get("preemption_count")),
    ]
    if job.get("array_id") is not None:
        fields.insert(1, ("Array task", job_ref(job)))
    if job.get("adaptive_app"):
        fields.append(("Adaptive", f"{job['adaptive_app']}, 1-{job.get('max_gpus') or job.get('num_gpus')} GPUs"))
    if job.get("model") or job.get("plan"):
        fields += [
            ("Model", job.get("model")),
            ("Plan", job.get("plan")),
            ("Allowed plans", ", ".join(job.get("allowed_plans") or []) or None),
            ("GPU range", f"{job.get('min_gpus') or job.get('num_gpus')}-{job.get('max_gpus') or job.get('num_gpus')}"),
            ("Guaranteed", job.get("guaranteed")),
            ("Reconfigurations", job.get("reconfiguration_count")),
        ]
    sections = [key_values(fields)]
    if job.get("attempts"):
        sections.append("Attempts:\n" + render_table(ATTEMPT_COLUMNS, job["attempts"]))
        if job.get("model") or job.get("plan") or job.get("adaptive_app"):
            batch = [("BATCH", lambda a: a.get("batch_size") or None)] if job.get("adaptive_app") else []
            sections.append("Plan history:\n" + render_table(PLAN_COLUMNS[:-1] + batch + PLAN_COLUMNS[-1:],
                                                              job["attempts"]))
    if job.get("progress"):
        sections.append(format_progress(job["progress"]))
    sections += node_messages(job.get("attempts") or [])
    if job.get("events"):
        sections.append("Events:\n" + render_table(EVENT_COLUMNS, job["events"]))
    return "\n\n".join(sections)


# -- cancel -------------------------------------------------------------------

def cmd_cancel(client: ApiClient, args: argparse.Namespace, out: TextIO) -> int:
    """Each job in turn, as scancel does: a job the API refuses is reported at the end (its message, after
    its id when several were named) and the others are still cancelled; an unreachable server stops at
    once. ``--json``: the job object for one id, a list of the cancelled jobs for several."""
    return _each_job(client, client.cancel_job, args, out, lambda job: str(job.get("state")))


def cmd_hold(client: ApiClient, args: argparse.Namespace, out: TextIO) -> int:
    """``hold`` and ``release``: each job in turn, as ``cancel`` does (a refused job is named at the end,
    the others are still changed and reported)."""
    release = args.cmd == "release"

    def report(job: dict[str, Any]) -> str:
        return f"{job.get('state')}, " + (f"held ({job['hold']})" if job.get("hold") else "not held")

    return _each_job(client, lambda job_id: client.hold_job(job_id, release=release), args, out, report)


def _each_job(client: ApiClient, change: Callable[[Any], dict[str, Any]], args: argparse.Namespace, out: TextIO,
              report: Callable[[dict[str, Any]], str]) -> int:
    """``change`` each of ``args.job_ids`` in turn, writing ``Job ID: <report>`` for each changed job (an
    array's id changes every task: a line per task, as they are after it); the refusals (the API's
    message, after the id when several were named) are raised together at the end as one ``ApiError``;
    an unreachable server stops at once. ``--json``: the job object for one id, a list of the changed
    jobs for several."""
    changed, refused = [], []
    for job_id in args.job_ids:
        try:
            job = change(job_id)
        except ApiError as exc:
            if exc.status is None:
                raise
            refused.append(f"{job_id}: {exc.message}" if len(args.job_ids) > 1 else exc.message)
            continue
        changed.append(job)
        if not args.json:
            for one in _tasks_if_array(client, job_id, job):
                out.write(f"Job {job_ref(one) or job_id}: {report(one)}\n")
    if args.json and changed:
        dump_json(changed if len(args.job_ids) > 1 else changed[0], out)
    if refused:
        raise ApiError("; ".join(refused))
    return 0


def _tasks_if_array(client: ApiClient, job_id: Any, job: dict[str, Any]) -> list[dict[str, Any]]:
    """The tasks of the array ``job_id`` names as a whole (a bare id heading an array), read again after
    a change to all of them; else ``[job]``."""
    if "_" in str(job_id) or job.get("array_id") is None or job.get("array_id") != job.get("id"):
        return [job]
    tasks = [task for body in client.iter_jobs(array=str(job["array_id"])) for task in body.get("results", [])]
    return sorted(tasks, key=lambda task: task.get("array_index") or 0) or [job]


def cmd_update(client: ApiClient, args: argparse.Namespace, out: TextIO) -> int:
    job = client.update_job(args.job_id, args.priority)
    if args.json:
        dump_json(job, out)
    else:
        out.write(f"Job {job.get('id', args.job_id)}: {job.get('state')}, priority {job.get('priority')}\n")
    return 0


# -- quota & nodes ------------------------------------------------------------


def cmd_quota(client: ApiClient, args: argparse.Namespace, out: TextIO) -> int:
    body = client.quota()
    if args.json:
        dump_json(body, out)
        return 0
    out.write(format_quota(body) + "\n")
    return 0


def cmd_nodes(client: ApiClient, args: argparse.Namespace, out: TextIO) -> int:
    body = client.nodes()
    nodes = body.get("results", []) if isinstance(body, dict) else body
    if args.json:
        dump_json(nodes, out)
        return 0
    out.write(render_table(NODE_COLUMNS, nodes) + "\n")
    return 0


def _gpu_total(node: Mapping[str, Any]) -> Any:
    if node.get("gpu_count") is not None:
        return node["gpu_count"]
    gpus = node.get("gpus")
    return len(gpus) if isinstance(gpus, list) else gpus


def _gpu_free(node: Mapping[str, Any]) -> Any:
    if node.get("free_gpus") is not None:
        return node["free_gpus"]
    gpus = node.get("gpus")
    if isinstance(gpus, list) and all(isinstance(g, dict) and "allocated" in g for g in gpus):
        return sum(1 for g in gpus if not g["allocated"])
    return None


NODE_COLUMNS: list[Column] = [
    ("NAME", lambda n: n.get("name")),
    ("STATE", lambda n: n.get("state")),
    ("GPUS", _gpu_total),
    ("FREE", _gpu_free),
    ("CPUS", lambda n: n.get("cpus")),
    ("MEM_GB", lambda n: n.get("mem_gb")),
    ("LAST_HEARTBEAT", lambda n: local_time(n.get("last_heartbeat"))),
    ("PROTOCOL", lambda n: f"{n.get('protocol_version')} (old agent)" if n.get("agent_outdated")
     else n.get("protocol_version")),
]

HANDLERS: dict[str, Handler] = {
    "submit": cmd_submit,
    "list": cmd_list,
    "show": cmd_show,
    "cancel": cmd_cancel,
    "hold": cmd_hold,
    "update": cmd_update,
    "release": cmd_hold,
    "logs": cmd_logs,
    "quota": cmd_quota,
    "nodes": cmd_nodes,
    "notebook": cmd_session,
    "shell": cmd_session,
    "usage": cmd_usage,
    "share": cmd_share,
}

