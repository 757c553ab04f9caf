"""Where a node's attempt cgroups live: the cgroup mounts and the agent's own cgroup, read from /proc text."""

from __future__ import annotations

from cluster.agent.cgroup_tree import _mounts, _own_paths


def test_mounts_and_own_paths_are_read_from_proc_text():
    mountinfo = ("32 31 0:29 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n"
                 "35 31 0:32 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n"
                 "40 31 0:37 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n")
    v1, v2 = _mounts(mountinfo)
    assert {k: str(v) for k, v in v1.items()} == {"cpu": "/sys/fs/cgroup/cpu", "memory": "/sys/fs/cgroup/memory"}
    assert str(v2) == "/sys/fs/cgroup/unified"
    assert _own_paths("4:memory:/slice/a\n1:cpu,cpuacct:/\n0::/user.slice\n") == {
        "memory": "/slice/a", "cpu": "/", "cpuacct": "/", "": "/user.slice"}
