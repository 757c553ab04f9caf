"""Session leader of one job attempt: runs the command and records how it ended.

Usage (started by the agent in a new session, stdout/stderr = the attempt log,
SIGTERM/SIGINT/SIGHUP blocked until the shim has its handlers)::

    python -I -S shim.py EXIT_FILE WORKDIR [OPTIONS] -- /bin/sh -c COMMAND

OPTIONS (given by an agent running as root; see docs/agent.md "Confinement"):
``--cgroup-procs FILE`` (repeated): the shim writes its own pid into each
FILE (a ``cgroup.procs``) before anything of the job exists, so the job starts
inside its cgroups; ``--uid U --gid G --groups G1,G2``: the job's process
drops to that identity (setgroups, setgid, setuid, in that order, then
PR_SET_NO_NEW_PRIVS) between fork and exec. The shim itself stays root: the
job cannot signal it, and cannot forge EXIT_FILE (its directory is root's).

Why a shim instead of running ``/bin/sh -c`` directly:

* Exit status survives the agent. The shim, not the agent, waits for the
  command and writes EXIT_FILE, so an agent that restarts while the job runs
  still learns the exact exit code (it re-adopts the shim by pid).
* The job is "all its processes". dash does not ``exec`` the command, so on a
  SIGTERM notice the wrapping shell dies at once while the real job (its child)
  is still writing its checkpoint. The shim is a child subreaper: orphaned
  descendants are re-parented to it and it exits only when every one of them
  has exited, so the agent's "attempt ended" means "nothing of it runs".

EXIT_FILE (JSON, replaced atomically) is written when the command's own
process ends (``done`` false) and again when the last descendant has ended
(``done`` true)::

    {"main": {"exit_code": int|null, "signal": int|null, "at": epoch},
     "last": {...the last process to end...}, "done": bool, "ended_at": epoch|null}

Fencing. When the agent gives ``GPUSCHED_AGENT_LEASE`` (a file it touches
while it runs) and ``GPUSCHED_FENCE_AFTER`` (seconds, F), the shim checks the
file's age every second or so; once the agent has been gone for
``max(F - GRACE_PERIOD, F / 2)`` it sends the group SIGTERM (the job's notice,
so it can checkpoint), at F it SIGKILLs every other process of its group, and
it records ``"fenced": true``.
The server restarts the jobs of a node whose agent fell silent elsewhere; the
fence makes sure the old processes are gone by then, so no job runs twice. An
agent that restarts within the fence period adopts its jobs as before.

The shim ignores SIGTERM, SIGINT and SIGHUP (sent to the whole process group)
with a no-op handler rather than SIG_IGN, because handlers are reset on exec and
the job must see default dispositions. Only the standard library is used and
the interpreter runs with -I -S, so the shim starts fast and ignores the job's
PYTHON* variables.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
import time

_PR_SET_CHILD_SUBREAPER = 36
_PR_SET_NO_NEW_PRIVS = 38
ENV_LEASE = "GPUSCHED_AGENT_LEASE"
ENV_FENCE_AFTER = "GPUSCHED_FENCE_AFTER"


def _status(wait_status: int, at: float) -> dict:
    if os.WIFSIGNALED(wait_status):
        return {"exit_code": None, "signal": os.WTERMSIG(wait_status), "at": at}
    return {"exit_code": os.WEXITSTATUS(wait_status), "signal": None, "at": at}


def _write(path: str, record: dict) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(record, f)
    os.replace(tmp, path)


def _become_subreaper() -> None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        # Not Linux: orphans then go to init and the shim ends with the command.
        pass


def _no_new_privs() -> None:
    """In the job's child after the uid switch: exec can never gain privilege (setuid bits, file capabilities)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")


def _join_cgroups(procs_files: list[str]) -> None:
    for path in procs_files:
        with open(path, "w") as f:
            f.write(str(os.getpid()))


class Options:
    """The shim's options between WORKDIR and ``--`` (see the module docstring)."""

    def __init__(self, args: list[str]) -> None:
        self.cgroup_procs: list[str] = []
        self.uid: int | None = None
        self.gid: int | None = None
        self.groups: list[int] = []
        it = iter(args)
        for name in it:
            value = next(it)
            if name == "--cgroup-procs":
                self.cgroup_procs.append(value)
            elif name == "--uid":
                self.uid = int(value)
            elif name == "--gid":
                self.gid = int(value)
            elif name == "--groups":
                self.groups = [int(g) for g in value.split(",") if g]
            else:
                raise ValueError(f"unknown option {name}")
        if (self.uid is None) != (self.gid is None) or self.uid == 0:
            raise ValueError("--uid and --gid go together, and never uid 0")

    def popen_identity(self) -> dict:
        """Popen's arguments dropping the child to the job's identity (none without --uid)."""
        if self.uid is None:
            return {}
        return {"user": self.uid, "group": self.gid, "extra_groups": self.groups, "preexec_fn": _no_new_privs}


_FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class Fence:
    """Stops the rest of the process group once the agent's lease file is older than ``after`` seconds:
    SIGTERM when it is ``max(after - grace, after / 2)`` old, SIGKILL at ``after``."""

    def __init__(self, lease: str | None, after: float, grace: float = 0.0) -> None:
        self.lease, self.after, self.fenced = lease, after, False
        self.notice_age = max(after - grace, after / 2)
        self.kill_at: float | None = None  # epoch of the SIGKILL, once the notice is given

    @classmethod
    def from_env(cls) -> "Fence":
        return cls(os.environ.get(ENV_LEASE) or None, _seconds(ENV_FENCE_AFTER), _seconds("GRACE_PERIOD"))

    @property
    def active(self) -> bool:
        return self.lease is not None and self.after > 0

    def check(self, *_args: object) -> None:
        """SIGALRM handler: fence once the lease is stale (a missing file is not stale: nothing to judge).
        Once the notice is given the SIGKILL follows at its time, whatever the lease does meanwhile."""
        now = time.time()
        if self.kill_at is None:
            try:
                mtime = os.stat(self.lease).st_mtime
            except OSError:
                return
            if now - mtime <= self.notice_age:
                return
            self.fenced = True
            self.kill_at = mtime + self.after
            grace = max(0.0, self.kill_at - now)
            print(f"gpusched: the node agent has been gone for {now - mtime:.0f} s: stopping this job so that it "
                  f"cannot run twice (SIGTERM, then SIGKILL in {grace:.1f} s)" if grace else
                  f"gpusched: the node agent has been gone for {now - mtime:.0f} s (more than {self.after:g} s): "
                  "stopping this job so that it cannot run twice", file=sys.stderr, flush=True)
            if grace:
                os.killpg(0, signal.SIGTERM)  # the shim itself ignores it (no-op handler)
                signal.setitimer(signal.ITIMER_REAL, grace, min(1.0, self.after / 4))
                return
        if now < self.kill_at:
            return
        self.kill_at = float("inf")  # once
        for pid in _group_members():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _seconds(name: str) -> float:
    """A non-negative number of seconds from the environment; 0 when unset or malformed."""
    try:
        return max(0.0, float(os.environ.get(name) or 0))
    except ValueError:
        return 0.0


def _group_members() -> list[int]:
    """Pids of the other processes in this shim's process group (read from /proc)."""
    me = os.getpid()
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                raw = f.read()
        except OSError:
            continue
        fields = raw[raw.rindex(b")") + 2:].split()
        if int(fields[2]) == me:
            members.append(int(entry))
    return members


def run(exit_file: str, workdir: str, argv: list[str], options: Options | None = None) -> int:
    """Run ``argv`` in ``workdir``, wait for it and all its descendants, record statuses."""
    options = options or Options([])
    early: list[int] = []
    for sig in _FORWARDED:
        signal.signal(sig, lambda signum, _frame: early.append(signum))
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _FORWARDED)
    _become_subreaper()
    try:
        _join_cgroups(options.cgroup_procs)
        os.chdir(workdir)
        main = subprocess.Popen(argv, stdin=subprocess.DEVNULL, close_fds=True, **options.popen_identity())
    except (OSError, subprocess.SubprocessError) as exc:
        print(f"cannot start {argv!r} in {workdir}: {exc}", file=sys.stderr, flush=True)
        failed = {"exit_code": 127, "signal": None, "at": time.time()}
        _write(exit_file, {"main": failed, "last": failed, "done": True, "ended_at": failed["at"]})
        return 127
    for sig in _FORWARDED:
        signal.signal(sig, lambda *_: None)
    # A notice that arrived before the command existed is passed on to it.
    for signum in dict.fromkeys(early):
        os.killpg(0, signum)
    record: dict = {"main": None, "last": None, "done": False, "ended_at": None}
    fence = Fence.from_env()
    if fence.active:
        # The check runs from a timer signal, so waitpid below still reaps at once.
        signal.signal(signal.SIGALRM, fence.check)
        period = min(1.0, fence.after / 4)
        signal.setitimer(signal.ITIMER_REAL, period, period)
    while True:
        try:
            pid, wait_status = os.waitpid(-1, 0)
        except ChildProcessError:
            break
        status = _status(wait_status, time.time())
        record["last"] = status
        if pid == main.pid:
            main.returncode = 0  # reaped here; stops Popen.__del__ from waiting
            record["main"] = status
            if fence.fenced:
                record["fenced"] = True
            _write(exit_file, record)
    if fence.active:
        signal.setitimer(signal.ITIMER_REAL, 0)
    if fence.fenced:
        record["fenced"] = True
    record["done"] = True
    record["ended_at"] = time.time()
    _write(exit_file, record)
    return 0


def main() -> int:
    args = sys.argv[1:]
    if "--" not in args or args.index("--") < 2 or args.index("--") == len(args) - 1:
        print("usage: shim.py EXIT_FILE WORKDIR [OPTIONS] -- COMMAND...", file=sys.stderr)
        return 2
    split = args.index("--")
    try:
        options = Options(args[2:split])
    except (ValueError, StopIteration) as exc:
        print(f"shim.py: bad options {args[2:split]!r}: {exc}", file=sys.stderr)
        return 2
    return run(args[0], args[1], args[split + 1:], options)


if __name__ == "__main__":
    sys.exit(main())
