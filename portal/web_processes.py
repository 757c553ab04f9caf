"""The portal's web server as several daphne processes sharing one listening socket.

One daphne process runs every request's Python on one core. This launcher binds
``HOST``:``PORT`` once and starts ``WEB_PROCESSES`` daphne processes on that socket
(``daphne --fd``); the kernel hands each new connection to one of them. WebSockets
work across processes because the live updates go through the Redis channel layer.

It supervises them: a process that exits is logged and replaced (one dying is never a
reason to stop the others), unless processes keep dying (``GIVE_UP_DEATHS`` within
``GIVE_UP_WINDOW_S``: a configuration error, not a crash), when it stops them all and
exits 1 so that the service manager reports it. SIGTERM or SIGINT stops them all
(SIGTERM, then SIGKILL after ``STOP_GRACE_S``) and exits 0.

    python -m portal.web_processes        # what scripts/serve.sh web runs
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable, Mapping
from pathlib import Path

from portal.env import env_int

log = logging.getLogger("portal.web_processes")

GIVE_UP_DEATHS = 5
GIVE_UP_WINDOW_S = 30.0
STOP_GRACE_S = 20.0
RESTART_DELAY_S = 0.5


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity: a container's cpuset), else all of them."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def default_processes(environ: Mapping[str, str] = os.environ) -> int:
    """``WEB_PROCESSES``, by default one per usable core up to 4 (each holds its own database pool)."""
    return env_int("WEB_PROCESSES", min(usable_cores(), 4), environ=environ, minimum=1)


def listen(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host``:``port`` that child processes inherit."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(1024)
    sock.set_inheritable(True)
    return sock


def daphne_command(fd: int) -> list[str]:
    return [str(Path(sys.executable).with_name("daphne")), "--fd", str(fd), "portal.asgi:application"]


class Supervisor:
    """Keeps ``count`` processes of ``command`` running (see the module doc)."""

    def __init__(self, command: list[str], count: int, pass_fds: tuple[int, ...],
                 spawn: Callable[..., subprocess.Popen] = subprocess.Popen) -> None:
        self.command, self.count, self.pass_fds, self._spawn = command, count, pass_fds, spawn
        self.children: list[subprocess.Popen] = []
        self.deaths: deque[float] = deque()
        self.stopping = False

    def start(self) -> None:
        while len(self.children) < self.count:
            self.children.append(self._spawn(self.command, pass_fds=self.pass_fds))
        log.info("web: %d processes (%s)", self.count, ", ".join(str(c.pid) for c in self.children))

    def check(self, now: float) -> bool:
        """Replace the processes that exited; False when they die too often to go on. Nothing is
        replaced once stopping (a Ctrl-C reaches the processes too, before the loop sees it)."""
        if self.stopping:
            return True
        for child in list(self.children):
            status = child.poll()
            if status is None:
                continue
            self.children.remove(child)
            self.deaths.append(now)
            log.warning("web: process %s exited with status %s; starting another", child.pid, status)
        while self.deaths and now - self.deaths[0] > GIVE_UP_WINDOW_S:
            self.deaths.popleft()
        if len(self.deaths) >= GIVE_UP_DEATHS:
            log.error("web: %d processes exited within %.0f s; stopping", len(self.deaths), GIVE_UP_WINDOW_S)
            return False
        if len(self.children) < self.count:
            time.sleep(RESTART_DELAY_S)
            self.start()
        return True

    def stop(self) -> None:
        """SIGTERM to every process, SIGKILL to those still running after ``STOP_GRACE_S``."""
        self.stopping = True
        for child in self.children:
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        for child in self.children:
            try:
                child.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    host, port = os.environ.get("HOST", "127.0.0.1"), env_int("PORT", 8000, minimum=1)
    count = default_processes()
    sock = listen(host, port)
    supervisor = Supervisor(daphne_command(sock.fileno()), count, (sock.fileno(),))

    def on_signal(signum: int, frame: object) -> None:
        supervisor.stopping = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    log.info("web: listening on %s:%d", host, port)
    supervisor.start()
    healthy = True
    while not supervisor.stopping and healthy:
        time.sleep(0.2)
        healthy = supervisor.check(time.monotonic())
    supervisor.stop()
    return 0 if healthy else 1


if __name__ == "__main__":
    sys.exit(main())
