"""Starting, watching and signalling job process groups (no broker, no state).

An attempt is represented on the node by its shim process (see shim.py), which
leads a new session and process group: its pid is the group id the agent
signals. The agent watches the shim either as its own child (``ChildHandle``)
or, after an agent restart, as an adopted process identified by pid and kernel
start time so a recycled pid is never mistaken for it (``AdoptedHandle``).
"""

from __future__ import annotations

import errno
import logging
import os
import signal
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

log = logging.getLogger(__name__)

SHIM_PATH = Path(__file__).with_name("shim.py")
SHELL = "/bin/sh"


def proc_stat(pid: int) -> tuple[str, int] | None:
    """(state letter, start time in clock ticks) of ``pid`` from /proc, or None if gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # The command name (field 2) may contain spaces and ')'; fields after the
    # last ')' are space-separated: state is field 3, starttime field 22.
    fields = raw[raw.rindex(b")") + 2 :].split()
    return fields[0].decode(), int(fields[19])


class ProcessHandle(Protocol):
    pid: int

    def alive(self) -> bool:
        """True while the process has not ended."""

    def wait_status(self) -> int | None:
        """Popen-style returncode (negative = signal) once ended, None if unknown."""


class ChildHandle:
    """A shim this agent started and reaps itself."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self._status: int | None = None

    def alive(self) -> bool:
        if self._status is None:
            try:
                pid, wait_status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                # Reaped elsewhere (cannot happen in the agent); treat as ended, status unknown.
                self._status = 0
                return False
            if pid == 0:
                return True
            self._status = os.waitstatus_to_exitcode(wait_status)
        return False

    def wait_status(self) -> int | None:
        return self._status if not self.alive() else None


@dataclass
class AdoptedHandle:
    """A shim started by a previous agent process; not our child, watched via /proc."""

    pid: int
    start_ticks: int | None

    def alive(self) -> bool:
        stat = proc_stat(self.pid)
        if stat is None:
            return False
        state, ticks = stat
        # A zombie has ended; a different start time means the pid was reused.
        return state not in ("Z", "X") and (self.start_ticks is None or ticks == self.start_ticks)

    def wait_status(self) -> int | None:
        return None


def signal_group(pgid: int, sig: int) -> bool:
    """Send ``sig`` to process group ``pgid``; False if the group no longer exists."""
    try:
        os.killpg(pgid, sig)
        return True
    except ProcessLookupError:
        return False
    except PermissionError as exc:
        # EPERM also happens when only zombies are left in the group.
        if exc.errno != errno.EPERM:
            raise
        log.warning("no permission to signal process group %d with %s", pgid, signal.Signals(sig).name)
        return False


# Blocked from the shim's first instruction until it has installed its own
# handlers (it unblocks them itself), so an early notice cannot kill the shim.
_SHIM_BLOCKED = {signal.SIGTERM, signal.SIGINT, signal.SIGHUP}


def spawn(command: str, *, cwd: Path, env: dict[str, str], log_path: Path, exit_path: Path,
          shim_args: Sequence[str] = (), prefix: Sequence[str] = ()) -> ChildHandle:
    """Start ``/bin/sh -c command`` in ``cwd`` under a shim leading a new session.

    stdout and stderr go to ``log_path`` (emptied first: a launch that gets
    here is of an attempt new to this node, so anything in the file is another
    job's; then appended, created 0600: the open file belongs to the job
    processes, so it keeps filling while the agent is down, and the job needs
    no access to the file itself); stdin is /dev/null.
    ``shim_args`` are the shim's confinement options (cgroups, identity);
    ``prefix`` runs the shell under a container runtime (``bwrap ...``).
    Raises OSError if the shim cannot be started.
    """
    exit_path.unlink(missing_ok=True)
    out = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    try:
        pid = os.posix_spawn(
            sys.executable,
            [sys.executable, "-I", "-S", str(SHIM_PATH), str(exit_path), str(cwd), *shim_args, "--",
             *prefix, SHELL, "-c", command],
            env,
            file_actions=[
                (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                (os.POSIX_SPAWN_DUP2, out, 1),
                (os.POSIX_SPAWN_DUP2, out, 2),
            ],
            setsid=True,
            setsigmask=_SHIM_BLOCKED,
            # Python ignores these; jobs must start with the default action.
            setsigdef=(signal.SIGPIPE, signal.SIGXFSZ),
        )
    finally:
        os.close(out)
    return ChildHandle(pid)


@dataclass(frozen=True)
class FoundShim:
    """A live shim found in /proc (see ``find_shims``)."""

    pid: int
    start_ticks: int
    exit_path: Path
    env: dict[str, str]


def find_shims(jobs_dir: Path) -> list[FoundShim]:
    """Live shims whose exit file lies under ``jobs_dir`` (this agent's jobs), by scanning /proc.

    Used when the agent has lost track of attempts (no usable state file):
    their processes still run and hold GPUs. Processes that cannot be read
    (other users) are skipped.
    """
    found = []
    prefix = str(jobs_dir.resolve()) + os.sep
    for proc_dir in Path("/proc").iterdir():
        if not proc_dir.name.isdigit():
            continue
        try:
            argv = (proc_dir / "cmdline").read_bytes().split(b"\0")
            if len(argv) < 6 or argv[3].decode(errors="replace") != str(SHIM_PATH):
                continue
            exit_path = argv[4].decode(errors="replace")
            if not exit_path.startswith(prefix):
                continue
            raw_env = (proc_dir / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        stat = proc_stat(int(proc_dir.name))
        if stat is None or stat[0] in ("Z", "X"):
            continue
        env = dict(item.decode(errors="replace").split("=", 1) for item in raw_env if b"=" in item)
        found.append(FoundShim(int(proc_dir.name), stat[1], Path(exit_path), env))
    return found
