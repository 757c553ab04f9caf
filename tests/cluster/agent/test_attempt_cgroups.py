"""The supervisor's cgroup steps: nothing without cgroups; with them, unknown cgroups swept, usage read on release."""

from __future__ import annotations

import os
import subprocess

import pytest

from cluster.agent import attempt_cgroups
from cluster.agent.attempt import TrackedAttempt
from cluster.agent.cgroup_tree import CgroupTree
from cluster.agent.cgroups import Limits
from tests.cluster.agent.agent_testlib import wait_until
from tests.cluster.agent.confined import unavailable


def _att(job: str, attempt: int = 1, **changes) -> TrackedAttempt:
    return TrackedAttempt(job_id=job, attempt=attempt, pgid=1, start_ticks=None, started_at=0.0, grace_period=0.0,
                   time_limit=None, job_dir="/j", checkpoint_dir="/c", **changes)


def test_without_cgroups_every_step_is_a_no_op():
    assert attempt_cgroups.release(None, _att("a")) == attempt_cgroups.Usage(None, None, False)
    assert attempt_cgroups.kill_unknown(None, set()) == []
    attempt_cgroups.kill_if_killed(None, _att("a", killed_at=1.0))


@pytest.fixture
def tree():
    tree, why = CgroupTree.detect(f"sweep-{os.getpid()}")
    if tree is None:
        unavailable(f"no cgroups here: {why}")
    yield tree
    for job, attempt in tree.existing():
        tree.attempt(job, attempt).remove()
    for base in tree.bases.values():
        base.rmdir()


def _sleeper(cgroup) -> subprocess.Popen:
    """``sleep 600`` inside ``cgroup``, returned once it is in."""
    join = "; ".join(f"echo $$ > {f}" for f in cgroup.procs_files)
    proc = subprocess.Popen(["sh", "-c", f"{join}; exec sleep 600"])
    wait_until(lambda: proc.pid in cgroup.pids(), what="the sleeper to join its cgroup")
    return proc


def test_the_start_sweep_kills_only_cgroups_no_attempt_owns(tree):
    known, stray = tree.create("known", 1, Limits()), tree.create("stray", 3, Limits())
    keep, lost = _sleeper(known), _sleeper(stray)
    try:
        assert attempt_cgroups.kill_unknown(tree, {("known", 1)}) == [("stray", 3)]
        assert lost.wait(timeout=60) == -9
        assert keep.poll() is None and known.exists() and not stray.exists()
    finally:
        keep.kill()
        keep.wait()


def test_release_reads_usage_kills_leftovers_and_removes_the_cgroup(tree):
    cgroup = tree.create("done", 1, Limits(mem_bytes=256 << 20))
    left = _sleeper(cgroup)
    # On a busy machine the sleeper can be in its cgroup before it has run there at all (CPU time
    # is charged when it next runs): there is usage to read once the kernel has charged some.
    wait_until(lambda: (cgroup.cpu_seconds() or 0.0) > 0, what="the sleeper's CPU time in its cgroup")
    usage = attempt_cgroups.release(tree, _att("done"))
    assert left.wait(timeout=60) == -9
    assert usage.peak_mem_bytes > 0 and usage.cpu_seconds > 0 and usage.oom_killed is False
    assert not cgroup.exists()
