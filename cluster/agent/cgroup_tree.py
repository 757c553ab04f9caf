"""Where this node's attempt cgroups live, and creating one with its limits.

``CgroupTree.detect`` finds the host's cgroup version and mounts (v2 when
/sys/fs/cgroup is itself cgroup2, else the v1 controllers' mounts; a hybrid
host's empty v2 tree is not used), places the node's tree under the agent's own
cgroup, and returns None (with the reason) where it cannot be used: not root,
or the controllers are not mounted or writable. See cgroups.py for the layout.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from cluster.agent.cgroups import (CFS_PERIOD_US, NVIDIA_MAJOR, V1_CONTROLLERS, AttemptCgroup, Limits, _write,
                                   cgroup_name, parse_cgroup_name)

log = logging.getLogger(__name__)

PARENT = "gpusched"
V2_CONTROLLERS = ("memory", "cpu", "pids")


def _mounts(mountinfo: str) -> tuple[dict[str, Path], Path | None]:
    """(v1 controller -> mount point, the v2 mount point or None) from /proc/self/mountinfo text."""
    v1: dict[str, Path] = {}
    v2: Path | None = None
    for line in mountinfo.splitlines():
        left, _, right = line.partition(" - ")
        parts, rparts = left.split(), right.split()
        if len(parts) < 5 or len(rparts) < 3:
            continue
        mount_point, fstype = Path(parts[4]), rparts[0]
        if fstype == "cgroup2" and (v2 is None or mount_point == Path("/sys/fs/cgroup")):
            v2 = mount_point
        elif fstype == "cgroup":
            for option in rparts[2].split(","):
                if option in V1_CONTROLLERS:
                    v1.setdefault(option, mount_point)
    return v1, v2


def _own_paths(proc_cgroup: str) -> dict[str, str]:
    """Controller ("" for v2) -> this process's cgroup path, from /proc/self/cgroup text."""
    paths: dict[str, str] = {}
    for line in proc_cgroup.splitlines():
        _, controllers, path = line.split(":", 2)
        for name in controllers.split(",") if controllers else [""]:
            paths[name] = path
    return paths


class CgroupTree:
    """The directories under which this node's attempt cgroups are made (one per controller, or one for v2)."""

    def __init__(self, version: int, bases: dict[str, Path]) -> None:
        self.version = version
        self.bases = bases

    @classmethod
    def detect(cls, node: str, mountinfo: str | None = None, proc_cgroup: str | None = None) -> tuple["CgroupTree | None", str]:
        """The node's tree (created if missing), or (None, why it cannot be used)."""
        if os.geteuid() != 0:
            return None, "the agent is not root, so it cannot create cgroups"
        v1, v2 = _mounts(mountinfo if mountinfo is not None else Path("/proc/self/mountinfo").read_text())
        own = _own_paths(proc_cgroup if proc_cgroup is not None else Path("/proc/self/cgroup").read_text())
        if v2 == Path("/sys/fs/cgroup") or (v2 is not None and not v1):
            tree = cls(2, {"unified": v2 / own.get("", "/").lstrip("/") / PARENT / node})
        else:
            missing = [c for c in V1_CONTROLLERS if c not in v1]
            if missing:
                return None, f"cgroup v1 controllers not mounted: {', '.join(missing)}"
            tree = cls(1, {c: v1[c] / own.get(c, "/").lstrip("/") / PARENT / node for c in V1_CONTROLLERS})
        try:
            tree._make_bases()
        except OSError as exc:
            return None, f"cannot create the node's cgroups: {exc}"
        return tree, f"cgroup v{tree.version} under {', '.join(sorted({str(p) for p in tree.bases.values()}))}"

    def _make_bases(self) -> None:
        for base in self.bases.values():
            base.mkdir(parents=True, exist_ok=True)
        if self.version == 2:
            # Controllers must be enabled on every level between the agent's cgroup and the attempts'.
            base = self.bases["unified"]
            for level in (base.parent.parent, base.parent, base):
                _write(level / "cgroup.subtree_control", " ".join(f"+{c}" for c in V2_CONTROLLERS))
        elif (self.bases["memory"] / "memory.use_hierarchy").exists():
            try:
                _write(self.bases["memory"] / "memory.use_hierarchy", "1")
            except OSError:
                pass  # already set by a parent; a child of a hierarchical parent cannot change it

    def attempt(self, job: str, attempt: int) -> AttemptCgroup:
        """The cgroup of ``job``'s ``attempt`` (whether or not it exists)."""
        name = cgroup_name(job, attempt)
        return AttemptCgroup(self.version, {c: base / name for c, base in self.bases.items()})

    def existing(self) -> list[tuple[str, int]]:
        """(job, attempt) of every attempt cgroup present under this node's tree."""
        found: dict[tuple[str, int], None] = {}
        for base in self.bases.values():
            try:
                entries = list(base.iterdir())
            except OSError:
                continue
            for entry in entries:
                key = parse_cgroup_name(entry.name) if entry.is_dir() else None
                if key is not None:
                    found[key] = None
        return list(found)

    def create(self, job: str, attempt: int, limits: Limits) -> AttemptCgroup:
        """Make the attempt's cgroup with ``limits``; raises OSError (the attempt must not start unconfined)."""
        cg = self.attempt(job, attempt)
        if cg.exists():
            cg.remove()  # a leftover of a launch that never started
        for d in dict.fromkeys(cg.dirs.values()):
            d.mkdir()
        if self.version == 2:
            _limit_v2(cg.dirs["unified"], limits)
        else:
            _limit_v1(cg.dirs, limits)
        return cg


def _limit_v1(dirs: dict[str, Path], limits: Limits) -> None:
    memory, cpu = dirs["memory"], dirs["cpu"]
    if limits.mem_bytes:
        _write(memory / "memory.limit_in_bytes", str(limits.mem_bytes))
        if (memory / "memory.memsw.limit_in_bytes").exists():
            _write(memory / "memory.memsw.limit_in_bytes", str(limits.mem_bytes))
    if limits.cpus:
        _write(cpu / "cpu.shares", str(max(2, round(1024 * limits.cpus))))
        _write(cpu / "cpu.cfs_period_us", str(CFS_PERIOD_US))
        _write(cpu / "cpu.cfs_quota_us", str(max(1000, round(limits.cpus * CFS_PERIOD_US))))
    _write(dirs["pids"] / "pids.max", str(limits.pids_max) if limits.pids_max else "max")
    for minor in limits.denied_gpu_minors():
        _write(dirs["devices"] / "devices.deny", f"c {NVIDIA_MAJOR}:{minor} rwm")


def _limit_v2(d: Path, limits: Limits) -> None:
    if limits.mem_bytes:
        _write(d / "memory.max", str(limits.mem_bytes))
        if (d / "memory.swap.max").exists():
            _write(d / "memory.swap.max", "0")
    if limits.cpus:
        _write(d / "cpu.weight", str(max(1, min(10000, round(100 * limits.cpus)))))
        _write(d / "cpu.max", f"{max(1000, round(limits.cpus * CFS_PERIOD_US))} {CFS_PERIOD_US}")
    _write(d / "pids.max", str(limits.pids_max) if limits.pids_max else "max")
    if limits.denied_gpu_minors():
        log.warning("cgroup v2: GPU device rules need a BPF program and are not applied to %s", d)
