"""Report a job's progress to the scheduler from inside the job.

    from gpusched import job

    for step in range(start, total):
        loss = train_step()
        job.progress(step=step + 1, total_steps=total, epoch=epoch, metrics={"loss": loss})
    job.checkpoint(step=total, path="ckpt/final.pt")

Each call appends one JSON line to the file named by ``$GPUSCHED_PROGRESS_FILE``
(set by the node agent for every attempt). The agent reads that file, checks
every line, forwards at most about one report per second to the portal (the
latest one wins) and drops anything malformed. Outside the scheduler (the
variable unset) every call does nothing, so the same script runs on a laptop.

Contract of the line (what the agent accepts; anything else is dropped):
``step`` int >= 0, ``total_steps`` int >= 1, ``epoch`` number >= 0,
``metrics`` up to 16 names (letters, digits, ``_ . / -``, at most 64
characters) mapped to finite numbers, ``checkpoint`` {"step", "path"}, ``t``
the Unix time of the call; one line at most 4 KiB. A call with a bad argument
raises ``TypeError`` or ``ValueError`` at once, in the script, rather than
being dropped silently on the node. Writing never raises: a progress report
is not worth failing a training run for.
"""

from __future__ import annotations

import json
import math
import numbers
import os
import re
import time

ENV_PROGRESS_FILE = "GPUSCHED_PROGRESS_FILE"
MAX_METRICS = 16
MAX_LINE_BYTES = 4096
_METRIC_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_./-]{0,63}$")


def progress(step=None, total_steps=None, epoch=None, metrics=None):
    """Report where the job is: ``step`` of ``total_steps``, ``epoch``, and ``metrics`` (name -> number).

    Returns True when the report was written, False when there is nowhere to
    write it (not running under the scheduler, or the file cannot be written).
    """
    record = {"t": time.time()}
    if step is not None:
        record["step"] = _count(step, "step", 0)
    if total_steps is not None:
        record["total_steps"] = _count(total_steps, "total_steps", 1)
    if epoch is not None:
        record["epoch"] = _number(epoch, "epoch", minimum=0.0)
    if metrics:
        record["metrics"] = _metrics(metrics)
    return _write(record)


def checkpoint(step=None, path=""):
    """Report that a checkpoint was saved (at ``step``, at ``path``); returns like ``progress``."""
    entry = {}
    if step is not None:
        entry["step"] = _count(step, "step", 0)
    if path:
        if not isinstance(path, (str, os.PathLike)):
            raise TypeError("checkpoint path must be a string or path")
        entry["path"] = str(path)[:256]
    return _write({"t": time.time(), "checkpoint": entry})


def _count(value, name, minimum):
    # numbers.Integral: numpy integers count too; bool is an int to Python but never a step.
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__}")
    value = int(value)
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value


def _number(value, name, minimum=None):
    if isinstance(value, bool):
        raise TypeError(f"{name} must be a number, got bool")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a number, got {type(value).__name__}") from None
    if not math.isfinite(number):
        raise ValueError(f"{name} must be finite, got {number}")
    if minimum is not None and number < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {number}")
    return number


def _metrics(metrics):
    if not isinstance(metrics, dict):
        raise TypeError("metrics must be a dict of name -> number")
    if len(metrics) > MAX_METRICS:
        raise ValueError(f"at most {MAX_METRICS} metrics per report, got {len(metrics)}")
    out = {}
    for name, value in metrics.items():
        if not isinstance(name, str) or not _METRIC_NAME.fullmatch(name):
            raise ValueError(f"metric name {name!r}: use 1-64 characters of A-Z a-z 0-9 _ . / - (not starting with a digit)")
        out[name] = _number(value, f"metrics[{name}]")
    return out


def _write(record):
    path = os.environ.get(ENV_PROGRESS_FILE)
    if not path:
        return False
    line = (json.dumps(record, separators=(",", ":"), allow_nan=False) + "\n").encode()
    if len(line) > MAX_LINE_BYTES:
        raise ValueError(f"report is {len(line)} bytes; at most {MAX_LINE_BYTES}")
    try:
        # One write() on an O_APPEND descriptor: a line is never interleaved with another writer's.
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)
    except OSError:
        return False
    return True
