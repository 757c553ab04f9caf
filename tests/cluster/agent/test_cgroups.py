"""Attempt cgroups on the host: limits written, a job inside from its start, accounting, kill-all, removal."""

from __future__ import annotations

import os
import subprocess
import tempfile

import pytest

from cluster.agent.cgroup_tree import CgroupTree
from cluster.agent.cgroups import Limits, cgroup_name, parse_cgroup_name
from tests.cluster.agent.confined import unavailable


def test_cgroup_names_split_back_into_job_and_attempt():
    assert parse_cgroup_name(cgroup_name("job.v1-2", 3)) == ("job.v1-2", 3)
    assert parse_cgroup_name("not-an-attempt") is None and parse_cgroup_name("@1") is None


def test_denied_gpu_minors_are_the_nodes_gpus_but_the_attempts():
    assert Limits(gpu_indices=(1, 3), gpu_count=4).denied_gpu_minors() == [0, 2]


@pytest.fixture
def tree():
    tree, why = CgroupTree.detect(f"unit-{os.getpid()}")
    if tree is None:
        unavailable(f"no cgroups here: {why}")
    yield tree
    for job, attempt in tree.existing():
        tree.attempt(job, attempt).remove()
    for base in tree.bases.values():
        base.rmdir()


def _run_inside(cgroup, script: str) -> subprocess.CompletedProcess:
    """Run python3 ``script`` inside ``cgroup``; its output goes through a file, since children it leaves hold a pipe open."""
    join = "; ".join(f"echo $$ > {f}" for f in cgroup.procs_files)
    with tempfile.TemporaryFile("w+") as out:
        done = subprocess.run(["sh", "-c", f"{join}; exec python3 -c \"$0\"", script], stdout=out, stderr=subprocess.STDOUT)
        out.seek(0)
        done.stdout = out.read()
    return done


def test_memory_past_the_limit_is_an_oom_kill_with_its_peak_recorded(tree):
    cg = tree.create("mem", 1, Limits(mem_bytes=32 << 20))
    done = _run_inside(cg, "x = bytearray(128 << 20)")
    assert done.returncode == -9
    assert cg.oom_killed()
    assert 16 << 20 < cg.peak_mem_bytes() <= 32 << 20
    assert cg.cpu_seconds() > 0


def test_within_its_limit_a_job_is_not_an_oom_kill(tree):
    cg = tree.create("fits", 1, Limits(mem_bytes=64 << 20, cpus=0.5))
    assert _run_inside(cg, "x = bytearray(8 << 20)").returncode == 0
    assert not cg.oom_killed()


def test_kill_all_kills_processes_that_left_the_process_group_and_remove_deletes_the_cgroup(tree):
    cg = tree.create("daemon", 1, Limits())
    done = _run_inside(cg, "import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(600)\nprint(os.getpid())")
    assert done.returncode == 0
    assert len(cg.pids()) == 1
    assert cg.kill_all() >= 1
    assert cg.pids() == set()
    assert tree.existing() == [("daemon", 1)]
    cg.remove()
    assert not cg.exists() and tree.existing() == []


def test_the_pids_limit_caps_forks(tree):
    cg = tree.create("forks", 1, Limits(pids_max=8))
    script = ("import os, time\nn = 0\ntry:\n    while n < 100:\n        if os.fork() == 0:\n            time.sleep(30); os._exit(0)\n"
              "        n += 1\nexcept OSError:\n    pass\nprint(n)")
    done = _run_inside(cg, script)
    assert int(done.stdout) < 8
    cg.remove()
