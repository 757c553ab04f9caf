"""The supervisor's use of its attempts' cgroups: kill-all at SIGKILL, accounting at the end, sweep at start.

Every function accepts ``tree`` None (single-user mode, no cgroups) and then
does nothing, so the supervisor calls them unconditionally.
"""

from __future__ import annotations

import logging
from collections.abc import Container
from typing import NamedTuple

from cluster.agent.attempt import TrackedAttempt, Key
from cluster.agent.cgroup_tree import CgroupTree

log = logging.getLogger(__name__)


class Usage(NamedTuple):
    """What an ended attempt used, from its cgroup (None: no cgroup to read)."""

    peak_mem_bytes: int | None = None
    cpu_seconds: float | None = None
    oom_killed: bool = False


def kill_if_killed(tree: CgroupTree | None, att: TrackedAttempt) -> None:
    """Once the attempt has been SIGKILLed, kill every process of its cgroup too.

    SIGKILL to the process group misses processes that left it (setsid, a
    double-forked daemon); the cgroup holds every one of them.
    """
    if tree is not None and att.killed_at is not None:
        tree.attempt(str(att.job_id), att.attempt).kill_all()


def kill_unknown(tree: CgroupTree | None, known: Container[Key]) -> list[Key]:
    """Kill and remove every attempt cgroup of the tree that is not in ``known``; return their keys.

    Run at agent start after adoption: such processes escaped supervision
    (their attempt was lost with the state file, or they outlived a shim), and
    no job may run on outside control.
    """
    if tree is None:
        return []
    unknown = [key for key in tree.existing() if key not in known]
    for job, attempt in unknown:
        cgroup = tree.attempt(job, attempt)
        log.warning("cgroup of %s attempt %d has no known attempt; killing its %d process(es)", job, attempt, len(cgroup.pids()))
        cgroup.remove()
    return unknown


def release(tree: CgroupTree | None, att: TrackedAttempt) -> Usage:
    """The ended attempt's peak memory, CPU-seconds and OOM kill; kills what is left and removes its cgroup."""
    if tree is None:
        return Usage()
    cgroup = tree.attempt(str(att.job_id), att.attempt)
    if not cgroup.exists():
        return Usage()
    cgroup.kill_all()
    usage = Usage(cgroup.peak_mem_bytes(), cgroup.cpu_seconds(), cgroup.oom_killed())
    cgroup.remove()
    return usage
