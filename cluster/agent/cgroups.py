"""A kernel control group per job attempt: limits, accounting, and killing everything in it.

Layout (one directory per attempt in every hierarchy used; ``<agent>`` is the
agent's own cgroup in that hierarchy, from /proc/self/cgroup, so a node's jobs
stay inside whatever slice the site gives the agent)::

    <mount>/<agent>/gpusched/<node>/<job>@<attempt>/

cgroup v1 (one mount per controller): memory (memory.limit_in_bytes and
memory.memsw.limit_in_bytes, so swap does not dodge the limit; OOM kills from
memory.oom_control, peak from memory.max_usage_in_bytes), cpu (cpu.shares and
a CFS quota of ``cpus`` x the period), cpuacct (cpuacct.usage), pids
(pids.max) and devices (a deny rule for every GPU device node of the node but
the attempt's own). cgroup v2 (one unified tree): memory.max and
memory.swap.max, cpu.weight and cpu.max, pids.max, memory.events, memory.peak
and cpu.stat; device rules need a BPF program there and are not applied.

The shim of the attempt writes its own pid into every ``cgroup.procs`` before
its job starts (``join_args``), so every process of the job is inside from its
first instruction; a job cannot move itself out (the files are root's).
"""

from __future__ import annotations

import logging
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

NVIDIA_MAJOR = 195  # /dev/nvidia<N> is c 195:N
CFS_PERIOD_US = 100_000
DEFAULT_PIDS_MAX = 4096
V1_CONTROLLERS = ("memory", "cpu", "cpuacct", "pids", "devices")
KILL_ROUNDS = 200


@dataclass(frozen=True)
class Limits:
    """What an attempt may use: ``cpus``/``mem_bytes`` 0 mean unlimited; GPUs are node-local indices."""

    cpus: float = 0.0
    mem_bytes: int = 0
    pids_max: int = DEFAULT_PIDS_MAX
    gpu_indices: tuple[int, ...] = ()
    gpu_count: int = 0

    def denied_gpu_minors(self) -> list[int]:
        """Minor numbers of the node's GPU device nodes the attempt must not open."""
        return [i for i in range(self.gpu_count) if i not in self.gpu_indices]


def cgroup_name(job: str, attempt: int) -> str:
    """``<job>@<attempt>``: '@' is not in the job id alphabet, so the name splits back unambiguously."""
    return f"{job}@{attempt}"


def parse_cgroup_name(name: str) -> tuple[str, int] | None:
    job, sep, attempt = name.rpartition("@")
    return (job, int(attempt)) if sep and job and attempt.isdigit() else None


def _write(path: Path, value: str) -> None:
    with open(path, "w") as f:
        f.write(value)


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _keyed(path: Path, key: str) -> int | None:
    """The value of ``key`` in a flat keyed file (memory.events, memory.oom_control, cpu.stat)."""
    try:
        for line in path.read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == key:
                return int(value)
    except (OSError, ValueError):
        return None
    return None


class AttemptCgroup:
    """One attempt's cgroup directories (one per hierarchy; they may not exist yet or any more)."""

    def __init__(self, version: int, dirs: dict[str, Path]) -> None:
        self.version = version
        self.dirs = dirs  # controller ("unified" for v2) -> directory

    @property
    def procs_files(self) -> list[Path]:
        return [d / "cgroup.procs" for d in dict.fromkeys(self.dirs.values())]

    def join_args(self) -> list[str]:
        """Shim options that make it enter this cgroup before the job starts."""
        return [arg for f in self.procs_files for arg in ("--cgroup-procs", str(f))]

    def pids(self) -> set[int]:
        found: set[int] = set()
        for f in self.procs_files:
            try:
                found.update(int(p) for p in f.read_text().split())
            except (OSError, ValueError):
                continue
        return found

    def kill_all(self) -> int:
        """SIGKILL every process in the cgroup until none is left (forks racing the kill included).

        Returns how many kills were sent. A process cannot leave the cgroup on
        its own, so repeating the sweep converges; pids.max bounds a fork bomb.
        """
        sent = 0
        for _ in range(KILL_ROUNDS):
            pids = self.pids()
            if not pids:
                break
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                    sent += 1
                except ProcessLookupError:
                    pass
            time.sleep(0.005)
        return sent

    def oom_killed(self) -> bool:
        """True when the kernel killed a process of the attempt for exceeding its memory limit."""
        if self.version == 2:
            count = _keyed(self.dirs["unified"] / "memory.events", "oom_kill")
        else:
            count = _keyed(self.dirs["memory"] / "memory.oom_control", "oom_kill") if "memory" in self.dirs else None
        return bool(count)

    def peak_mem_bytes(self) -> int | None:
        if self.version == 2:
            return _read_int(self.dirs["unified"] / "memory.peak")
        return _read_int(self.dirs["memory"] / "memory.max_usage_in_bytes") if "memory" in self.dirs else None

    def cpu_seconds(self) -> float | None:
        if self.version == 2:
            usec = _keyed(self.dirs["unified"] / "cpu.stat", "usage_usec")
            return None if usec is None else usec / 1e6
        nsec = _read_int(self.dirs["cpuacct"] / "cpuacct.usage") if "cpuacct" in self.dirs else None
        return None if nsec is None else nsec / 1e9

    def exists(self) -> bool:
        return any(d.is_dir() for d in self.dirs.values())

    def remove(self) -> None:
        """Kill what is left and remove the directories (an empty cgroup is removed with rmdir)."""
        self.kill_all()
        for d in dict.fromkeys(self.dirs.values()):
            for _ in range(50):
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:  # EBUSY: a killed process not yet fully gone
                    time.sleep(0.01)
            else:
                log.warning("cgroup %s could not be removed", d)
