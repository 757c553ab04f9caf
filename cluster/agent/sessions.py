"""Interactive sessions on this node: a port and a secret per session, and its readiness report.

A launch whose ``env`` names a session kind (``cluster.session_contract``)
gets a free TCP port on the node's advertised address and a fresh secret
(``secrets.token_urlsafe``) in its environment. Once the session's server
accepts connections on that port, REPORT_SESSION tells the server where it is
and which secret it requires; the secret appears in no log line. The report
carries the secret sealed to the server's public key that came with the launch
(``cluster.session_seal``; the key is taken out of the job's environment), so
the broker never holds it; only a launch without a key (an older server) has
it sent in clear. Probes are
short non-blocking connects made from the agent's loop, at most one per
session every ``PROBE_EVERY`` seconds, so a slow server cannot hold the loop.

The pending probes are saved with the agent's state (a root-only file), so
an agent restarted before a session's server answered still reports it.
"""

from __future__ import annotations

import logging
import secrets
import socket
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from typing import Any

from cluster import protocol, session_contract as contract, session_seal

log = logging.getLogger(__name__)

PROBE_EVERY = 0.05  # seconds between two connects to one session's port
PROBE_TIMEOUT = 0.02  # the loop waits at most this long per probe

Key = tuple[str, int]


@dataclass
class PendingSession:
    """A session whose server has not answered yet."""

    job_id: str | int
    attempt: int
    host: str
    port: int
    secret: str
    next_probe: float = 0.0
    report_key: str = ""  # the server's public key from the launch ("": an older server, the secret goes in clear)


def free_port(host: str) -> int:
    """A TCP port nothing listens on at ``host`` now (the kernel's choice; the job binds it next)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def accepts(host: str, port: int, timeout: float = PROBE_TIMEOUT) -> bool:
    """Whether something accepts TCP connections at ``host:port``."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


class Sessions:
    """Session ports of this node's attempts: ``prepare`` at launch, ``poll`` from the loop."""

    def __init__(self, host: str, probe: Callable[[str, int], bool] = accepts, node: str = "") -> None:
        self.host = host
        self.probe = probe
        self.node = node  # the sealed secret opens only for this node's report
        self.pending: dict[Key, PendingSession] = {}

    def prepare(self, cmd: protocol.LaunchCommand) -> protocol.LaunchCommand:
        """``cmd`` with the session's variables in its env if it is a session, else ``cmd`` itself."""
        if not contract.session_kind(cmd.env):
            return cmd
        env = dict(cmd.env)
        key = env.pop(contract.ENV_SESSION_REPORT_KEY, "")
        port, secret = free_port(self.host), secrets.token_urlsafe(32)
        if key and session_seal.check_public_key(key) is None:
            # Fail closed: a server that sends a key takes only sealed secrets, and clear text is what the key avoids.
            log.error("the launch of %s attempt %d carries a malformed key to seal its session's secret to; the "
                      "session will not be reported", cmd.job_id, cmd.attempt)
        else:
            self.pending[(str(cmd.job_id), cmd.attempt)] = PendingSession(cmd.job_id, cmd.attempt, self.host, port,
                                                                          secret, report_key=key)
        log.info("session of %s attempt %d will listen on %s:%d", cmd.job_id, cmd.attempt, self.host, port)
        return replace(cmd, env={**env, contract.ENV_SESSION_HOST: self.host, contract.ENV_SESSION_PORT: str(port),
                                 contract.ENV_SESSION_SECRET: secret,
                                 contract.ENV_SESSION_BASE_URL: contract.base_url(cmd.job_id)})

    def to_state(self) -> list[dict[str, Any]]:
        """The pending sessions, for the agent's state file."""
        return [asdict(s) for s in self.pending.values()]

    def restore(self, saved: list[dict[str, Any]]) -> None:
        """Take back the pending sessions a previous agent saved (probed again at once)."""
        for data in saved:
            s = PendingSession(**{**data, "next_probe": 0.0})
            self.pending[(str(s.job_id), s.attempt)] = s

    def poll(self, live: set[Key], now: float, emit: Callable[[str, dict[str, Any]], None]) -> bool:
        """Report each pending session of a ``live`` attempt whose port answers; drop the others.

        Returns whether the pending set changed (the state file is then saved again)."""
        changed = False
        for key, s in list(self.pending.items()):
            if key not in live:
                del self.pending[key]
                changed = True
            elif now >= s.next_probe:
                s.next_probe = now + PROBE_EVERY
                if self.probe(s.host, s.port):
                    del self.pending[key]
                    changed = True
                    log.info("session of %s attempt %d answers on %s:%d", s.job_id, s.attempt, s.host, s.port)
                    emit(contract.REPORT_SESSION, self._report(s))
        return changed

    def _report(self, s: PendingSession) -> dict[str, Any]:
        """REPORT_SESSION's kwargs for ``s``: the secret sealed to the launch's key when it had one."""
        report: dict[str, Any] = {"job_id": s.job_id, "attempt": s.attempt, "host": s.host, "port": s.port}
        if s.report_key:
            ctx = session_seal.context(self.node, s.job_id, s.attempt)
            report["sealed_secret"] = session_seal.seal_to(s.report_key, s.secret, ctx)
        else:
            report["secret"] = s.secret
        return report
