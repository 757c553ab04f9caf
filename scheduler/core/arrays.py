"""Job arrays, as Slurm's ``--array``: the index specification and task names.

A specification is a comma-joined list of items, each an index (``5``) or a
range with an optional step (``0-9``, ``0-9:2``): ``0-9``, ``0-9:2``,
``1,3,5``. Indices are kept in the order given, each once. Slurm's ``%N``
suffix (``0-9%2``: at most N tasks running at once) is split off by
``split_limit``; ``throttled`` then says which pending tasks wait for it. A task is named
``ARRAYID_INDEX``, where the array id is the id of its first task.

Pure: no Django.
"""

from __future__ import annotations

#: Largest index a task may have (Slurm's default MaxArraySize is 1001).
MAX_ARRAY_INDEX = 100_000


class ArrayError(ValueError):
    """A specification that does not parse, or asks for too many tasks; the message says which part."""


def parse_array(text: str, max_tasks: int) -> tuple[int, ...]:
    """The indices ``text`` names, in order, each once; raises ``ArrayError``."""
    text = (text or "").strip()
    if not text:
        raise ArrayError("give indices: 0-9, 0-9:2 or 1,3,5")
    if "%" in text:
        raise ArrayError("%N (tasks running at once) comes once, last: 0-9%2")
    indices: dict[int, None] = {}
    for item in text.split(","):
        for index in _item(item.strip()):
            indices[index] = None
            if len(indices) > max_tasks:
                raise ArrayError(f"at most {max_tasks} tasks in one array")
    return tuple(indices)


def _item(item: str) -> range:
    span, _, step_text = item.partition(":")
    first_text, dash, last_text = span.partition("-")
    first, last = _number(first_text, item), _number(last_text, item) if dash else None
    step = _number(step_text, item) if step_text or ":" in item else 1
    if last is None:
        if ":" in item:
            raise ArrayError(f"{item[:40]!r}: a step needs a range (0-9:2)")
        return range(first, first + 1)
    if last < first:
        raise ArrayError(f"{item[:40]!r}: the range ends before it starts")
    if step < 1:
        raise ArrayError(f"{item[:40]!r}: the step must be at least 1")
    return range(first, last + 1, step)


def _number(text: str, item: str) -> int:
    text = text.strip()
    if not (text.isascii() and text.isdigit()) or len(text) > 6 or int(text) > MAX_ARRAY_INDEX:
        raise ArrayError(f"{item[:40]!r} is not an index, a range or a stepped range (0 to {MAX_ARRAY_INDEX})")
    return int(text)


def split_limit(text: str) -> tuple[str, int | None]:
    """``"0-9%2"`` -> ``("0-9", 2)``; no ``%``: ``(text, None)``. Raises ``ArrayError`` for a bad N."""
    spec, sep, limit = (text or "").partition("%")
    if not sep:
        return spec, None
    limit = limit.strip()
    if not (limit.isascii() and limit.isdigit()) or len(limit) > 6 or int(limit) < 1:
        raise ArrayError(f"%{limit[:20]}: the tasks running at once must be a whole number of at least 1")
    return spec, int(limit)


def throttled(pending: list[tuple[str, int, int]], running: dict[int, int]) -> set[str]:
    """Pending tasks ``(job id, array id, limit)``, in queue order, that must wait because their array
    already runs ``running[array id]`` tasks: each array may start only ``limit - running`` more."""
    room: dict[int, int] = {}
    held = set()
    for job_id, array_id, limit in pending:
        left = room.setdefault(array_id, limit - running.get(array_id, 0))
        if left <= 0:
            held.add(job_id)
        room[array_id] = left - 1
    return held


def limit_message(array_id: int | str, limit: int) -> str:
    """The pending message of a task held by its array's ``%N`` (the loop's and the forecasts')."""
    return f"array {array_id} runs {limit} tasks at once"


def task_name(array_id: int, index: int) -> str:
    """How a task is addressed: ``12_3``."""
    return f"{array_id}_{index}"


def parse_task(text: str) -> tuple[int, int | None] | None:
    """``"12_3"`` -> ``(12, 3)``, ``"12"`` -> ``(12, None)``; None for anything else."""
    head, sep, tail = (text or "").partition("_")
    if not (head.isascii() and head.isdigit()) or len(head) > 18:
        return None
    if not sep:
        return int(head), None
    if not (tail.isascii() and tail.isdigit()) or len(tail) > 6:
        return None
    return int(head), int(tail)
