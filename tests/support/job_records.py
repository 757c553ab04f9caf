"""What the multi-host fault tests count: jobs that keep their own records, and the tally of a run.

A *recording job* (``recording_job``) appends one line per step to
``$CHECKPOINT_DIR/record`` (``<attempt> tick <epoch> <node>``), saves its step
count there on SIGTERM (writing the checkpoint marker, then ``<attempt> term
<epoch>`` and exiting 0) and resumes from it in its next attempt. So each
attempt's span as the job process itself lived it is [first line, last line],
whatever the server believed, and two attempts of one job that ran at the
same time show as overlapping spans. The server's side is its Attempt rows
(``started_at``, ``ended_at``), read over the network from the cluster's
database.

``tally`` gives the counts every such test reports: jobs submitted, finished,
requeued (attempts ended NODE_LOST or PREEMPTED and followed by another),
ran twice at once (from either side; must be 0), lost (not finished; must be 0).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any

STEP_SECONDS = 0.2


def recording_job(steps: int) -> str:
    """Shell command of a job of ``steps`` steps of STEP_SECONDS that records itself (see module doc)."""
    return (
        'd="$CHECKPOINT_DIR"; mkdir -p "$d"; i=$(cat "$d/step" 2>/dev/null || echo 0); '
        "trap 'echo $i > \"$d/step\"; touch \"$d/.checkpoint-complete\"; "
        "echo \"$GPUSCHED_ATTEMPT term $(date +%s.%N)\" >> \"$d/record\"; exit 0' TERM; "
        f'while [ "$i" -lt {steps} ]; do '
        'echo "$GPUSCHED_ATTEMPT tick $(date +%s.%N) $GPUSCHED_NODE" >> "$d/record"; '
        f"sleep {STEP_SECONDS}; i=$((i+1)); done; "
        'echo "$GPUSCHED_ATTEMPT end $(date +%s.%N)" >> "$d/record"'
    )


@dataclass
class Span:
    attempt: int
    first: float
    last: float
    nodes: frozenset[str]
    termed: bool  # the attempt got SIGTERM and saved before it ended
    finished: bool  # the attempt ran all its steps


def spans(checkpoints: Path, job_id: int) -> list[Span]:
    """The attempts of ``job_id`` as its processes recorded them, in order of their first line."""
    path = checkpoints / str(job_id) / "record"
    lines: dict[int, list[list[str]]] = defaultdict(list)
    if path.exists():
        for raw in path.read_text().splitlines():
            parts = raw.split()
            # A notice to the job's process group may kill ``date`` mid-line: such a line has no time.
            if len(parts) >= 3 and parts[0].isdigit() and _is_time(parts[2]):
                lines[int(parts[0])].append(parts)
    out = []
    for attempt, rows in lines.items():
        times = [float(r[2]) for r in rows]
        out.append(Span(attempt, min(times), max(times), frozenset(r[3] for r in rows if r[1] == "tick" and len(r) > 3),
                        any(r[1] == "term" for r in rows), any(r[1] == "end" for r in rows)))
    return sorted(out, key=lambda s: s.first)


def _is_time(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def overlaps_recorded(checkpoints: Path, job_ids: list[int]) -> list[str]:
    """Jobs two of whose attempts' processes were alive at the same time, from the jobs' own records."""
    problems = []
    for job_id in job_ids:
        for a, b in pairwise(spans(checkpoints, job_id)):
            if b.first < a.last:
                problems.append(f"job {job_id}: attempts {a.attempt} and {b.attempt} both ran during "
                                f"{b.first:.2f}-{min(a.last, b.last):.2f}")
    return problems


def attempt_rows(sql: Any, job_ids: list[int]) -> dict[int, list[tuple]]:
    """(number, state, started_at, ended_at, nodes) of every attempt of ``job_ids``, by job, in order."""
    rows = sql("SELECT job_id, number, state, extract(epoch FROM started_at), extract(epoch FROM ended_at), "
               "gpu_allocation FROM scheduler_attempt WHERE job_id = ANY(%s) ORDER BY job_id, number", (job_ids,))
    out: dict[int, list[tuple]] = defaultdict(list)
    for job_id, number, state, started, ended, allocation in rows:
        out[job_id].append((number, state, float(started), None if ended is None else float(ended), sorted(allocation)))
    return out


def overlaps_on_server(sql: Any, job_ids: list[int]) -> list[str]:
    problems = []
    for job_id, attempts in attempt_rows(sql, job_ids).items():
        for a, b in pairwise(attempts):
            if a[3] is None or a[3] > b[2]:
                problems.append(f"job {job_id}: attempt {a[0]} (ended {a[3]}) overlaps attempt {b[0]} (from {b[2]})")
    return problems


def tally(sql: Any, checkpoints: Path, job_ids: list[int]) -> dict[str, int]:
    """The counts of a run (see module doc)."""
    states = dict(sql("SELECT id, state FROM scheduler_job WHERE id = ANY(%s)", (job_ids,)))
    attempts = attempt_rows(sql, job_ids)
    requeued = sum(1 for rows in attempts.values() for a in rows[:-1] if a[1] in ("NODE_LOST", "PREEMPTED"))
    twice = len(overlaps_recorded(checkpoints, job_ids)) + len(overlaps_on_server(sql, job_ids))
    finished = sum(1 for j in job_ids if states.get(j) == "COMPLETED")
    return {"submitted": len(job_ids), "finished": finished, "requeued": requeued, "ran_twice_at_once": twice,
            "lost": len(job_ids) - finished}
