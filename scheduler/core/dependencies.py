"""Job dependencies, as Slurm's ``--dependency``: parsing, evaluation and cycles.

A dependency text is a comma-joined list of clauses, each a kind and one or
more job ids joined by colons: ``afterok:12:13,afterany:14``. Every clause
must hold (Slurm's ``,``), and a clause holds once every job it names has
ended as the kind asks:

* ``afterok``: each ended successfully (completed);
* ``afternotok``: each ended without success (failed, timed out, cancelled);
* ``afterany``: each ended, however.

A clause that can no longer hold (an ``afterok`` job failed, an
``afternotok`` job completed) makes the whole dependency never satisfied:
the live loop then cancels the waiting job with ``DependencyNeverSatisfied``.

Pure: no Django, no clock. Job ids are the core's strings; the caller maps
its own names (``12_3`` for an array task, say) to them before evaluating.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import Enum

#: Most clauses and most job ids one dependency may name (a bound on the work one submission can ask for).
MAX_DEPENDENCY_JOBS = 100
#: Longest job id token accepted in a dependency text.
MAX_ID_LENGTH = 64


class DependencyKind(str, Enum):
    """What a dependency waits for."""

    AFTEROK = "afterok"
    AFTERANY = "afterany"
    AFTERNOTOK = "afternotok"


class Outcome(str, Enum):
    """How a job a dependency names stands: not ended yet, ended well, ended badly."""

    WAITING = "waiting"
    OK = "ok"
    NOT_OK = "notok"


class Status(str, Enum):
    """Where a whole dependency stands."""

    WAITING = "waiting"
    SATISFIED = "satisfied"
    NEVER = "never"


class DependencyError(ValueError):
    """A dependency text that does not parse; the message says what and where."""


@dataclass(frozen=True, slots=True)
class Dependency:
    """One clause: ``kind`` on every job of ``job_ids``."""

    kind: DependencyKind
    job_ids: tuple[str, ...]

    def text(self) -> str:
        return ":".join((self.kind.value, *self.job_ids))


def parse(text: str) -> tuple[Dependency, ...]:
    """The clauses of ``text`` (empty or blank: none); raises ``DependencyError``.

    Job ids are kept as written (letters, digits, ``_``, ``-``, ``.``); the
    same id named twice in one clause counts once.
    """
    text = text.strip()
    if not text:
        return ()
    clauses, total = [], 0
    for raw in text.split(","):
        kind_text, _, rest = raw.strip().partition(":")
        try:
            kind = DependencyKind(kind_text.strip().lower())
        except ValueError:
            known = ", ".join(k.value for k in DependencyKind)
            raise DependencyError(f"unknown dependency type {kind_text.strip()[:40]!r}; use {known}") from None
        ids = tuple(dict.fromkeys(part.strip() for part in rest.split(":"))) if rest else ()
        if not ids or any(not _valid_id(i) for i in ids):
            bad = next((i for i in ids if not _valid_id(i)), "")
            raise DependencyError(
                f"{kind.value} needs job ids separated by ':'" + (f"; {bad[:40]!r} is not one" if bad else ""))
        total += len(ids)
        clauses.append(Dependency(kind, ids))
    if total > MAX_DEPENDENCY_JOBS:
        raise DependencyError(f"at most {MAX_DEPENDENCY_JOBS} jobs in one dependency, not {total}")
    return tuple(clauses)


def _valid_id(token: str) -> bool:
    return 0 < len(token) <= MAX_ID_LENGTH and all(c.isalnum() or c in "_-." for c in token) and token.isascii()


def render(clauses: Iterable[Dependency]) -> str:
    """The canonical text of ``clauses`` (what ``parse`` reads back to the same clauses)."""
    return ",".join(c.text() for c in clauses)


def job_ids(clauses: Iterable[Dependency]) -> set[str]:
    """Every job id the clauses name."""
    return {i for c in clauses for i in c.job_ids}


def _clause_status(clause: Dependency, outcomes: Mapping[str, Outcome]) -> Status:
    """A missing id counts as ended without a known success: it satisfies ``afterany`` only."""
    status = Status.SATISFIED
    for job_id in clause.job_ids:
        outcome = outcomes.get(job_id)
        if outcome is Outcome.WAITING:
            status = Status.WAITING
        elif clause.kind is DependencyKind.AFTEROK and outcome is not Outcome.OK:
            return Status.NEVER
        elif clause.kind is DependencyKind.AFTERNOTOK and outcome is not Outcome.NOT_OK:
            return Status.NEVER
    return status


def status(clauses: Iterable[Dependency], outcomes: Mapping[str, Outcome]) -> Status:
    """NEVER when any clause can no longer hold, else WAITING while any job named has not ended,
    else SATISFIED (also for no clauses at all)."""
    result = Status.SATISFIED
    for clause in clauses:
        found = _clause_status(clause, outcomes)
        if found is Status.NEVER:
            return Status.NEVER
        if found is Status.WAITING:
            result = Status.WAITING
    return result


def awaited(clauses: Iterable[Dependency], outcomes: Mapping[str, Outcome]) -> tuple[Dependency, ...] | None:
    """What a WAITING dependency still waits for, assuming every awaited job succeeds: the clauses
    cut to their jobs that have not ended (satisfied clauses dropped). None when that assumption
    cannot lift it (an ``afternotok`` clause still waiting), as in a start-time forecast, where
    every job runs to completion."""
    left = []
    for clause in clauses:
        ids = tuple(i for i in clause.job_ids if outcomes.get(i) is Outcome.WAITING)
        if not ids:
            continue
        if clause.kind is DependencyKind.AFTERNOTOK:
            return None
        left.append(Dependency(clause.kind, ids))
    return tuple(left)


def waiting_message(clauses: Iterable[Dependency], outcomes: Mapping[str, Outcome]) -> str:
    """A line a person reads on the job page: which jobs are still awaited."""
    awaited = sorted({i for c in clauses for i in c.job_ids if outcomes.get(i) is Outcome.WAITING}, key=_id_order)
    shown = ", ".join(awaited[:10]) + (f" and {len(awaited) - 10} more" if len(awaited) > 10 else "")
    return f"waiting for job{'s' if len(awaited) != 1 else ''} {shown} to end" if awaited else "dependency satisfied"


def never_message(clauses: Iterable[Dependency], outcomes: Mapping[str, Outcome]) -> str:
    """Why a dependency can never be satisfied, naming the first clause that cannot hold."""
    for clause in clauses:
        if _clause_status(clause, outcomes) is Status.NEVER:
            return f"{clause.text()} can no longer be satisfied"
    return "dependency can no longer be satisfied"


def _id_order(job_id: str) -> tuple[int, str]:
    return (int(job_id), "") if job_id.isdigit() else (0, job_id)


def find_cycle(edges: Mapping[str, Iterable[str]]) -> list[str] | None:
    """A cycle of the graph ``job -> jobs it depends on`` as ``[a, b, ..., a]``, or None.

    Iterative depth-first search, so a long chain does not reach Python's
    recursion limit; ids absent from ``edges`` have no dependencies.
    """
    done: set[str] = set()
    for root in edges:
        if root in done:
            continue
        path: list[str] = [root]
        on_path = {root}
        stack = [iter(edges.get(root, ()))]
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                stack.pop()
                finished = path.pop()
                on_path.discard(finished)
                done.add(finished)
                continue
            if nxt in on_path:
                return path[path.index(nxt):] + [nxt]
            if nxt not in done:
                path.append(nxt)
                on_path.add(nxt)
                stack.append(iter(edges.get(nxt, ())))
    return None
