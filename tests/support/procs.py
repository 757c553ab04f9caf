"""Job processes on this machine, read from /proc: how the live tests and the benchmarks find, watch
and kill the process groups their agents started.

A job is recognised by its environment: every job carries ``GPUSCHED_NODE=<its agent's name>``
(cluster/protocol.py), so an unrelated process is never hit. Agents of different runs may share a
name (the fault tests call theirs ``a`` and ``b``); such a run also gives its agents
``RUN_MARKER=<something of its own>``, which their jobs inherit, and passes the same value as
``marker`` so that it never kills the jobs of another run going on at the same time.

Standard library only: no Django, no pytest (the benchmarks use it too).
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterable
from pathlib import Path

#: Environment variable a run gives its agents (and so their jobs) to tell them from other runs'.
RUN_MARKER = "GPUSCHED_TEST_RUN"


def _stat_fields(raw: bytes) -> list[bytes]:
    """The fields of /proc/<pid>/stat after the command name (which may hold spaces and ')'):
    state first, then ppid, pgrp, ..."""
    return raw[raw.rindex(b")") + 2 :].split()


def job_groups(node_names: Iterable[str], marker: str | None = None) -> list[int]:
    """Process groups of the job processes started by the agents named ``node_names``; with
    ``marker``, only those whose environment also has ``RUN_MARKER=marker``."""
    names = {f"GPUSCHED_NODE={name}".encode() for name in node_names}
    groups = set()
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            env = set((proc / "environ").read_bytes().split(b"\0"))
            stat = (proc / "stat").read_bytes()
        except OSError:  # gone meanwhile, or not ours to read
            continue
        if env & names and (marker is None or _carries(env, marker)):
            groups.add(int(_stat_fields(stat)[2]))
    return sorted(groups)


def _carries(env: set[bytes], marker: str) -> bool:
    """True when a process's environment shows ``marker``: ``RUN_MARKER=marker`` where its agent passed it
    on, or a ``CHECKPOINT_DIR`` inside ``marker`` for a job given a clean environment (the runs that use a
    marker make it their temporary directory, which holds their agents' job directories)."""
    if f"{RUN_MARKER}={marker}".encode() in env:
        return True
    inside = f"CHECKPOINT_DIR={marker.rstrip('/')}/".encode()
    return any(entry.startswith(inside) for entry in env)


def group_alive(pgid: int) -> bool:
    """True while some process of group ``pgid`` has not ended (zombies do not count)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = _stat_fields(stat.read_bytes())
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] not in (b"Z", b"X"):
            return True
    return False


def kill_group(pgid: int, sig: int = signal.SIGKILL) -> None:
    """Signal process group ``pgid``; nothing if it is already gone."""
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def kill_job_groups(node_names: Iterable[str], marker: str | None = None) -> list[int]:
    """SIGKILL every job process group ``job_groups(node_names, marker)`` finds; return them."""
    groups = job_groups(node_names, marker)
    for pgid in groups:
        kill_group(pgid)
    return groups


def interruptible() -> None:
    """``preexec_fn`` for a script the test stops with Ctrl-C (SIGINT): a test run started in the background
    of a non-interactive shell ignores SIGINT, a shell cannot trap a signal ignored on entry, and so the
    script would never see the test's Ctrl-C; the child gets the default disposition a terminal gives."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
