"""Which cluster (server database) an agent's memory belongs to, and forgetting another one's.

An agent remembers jobs by ``(job_id, attempt)``: the newest attempt of each job (a launch not newer
is refused as stale), the exits of the last minutes (repeated in heartbeats), the reports not yet
delivered and the attempts it runs. Job ids start again at 1 in a new database, so when the server's
database is replaced under a running agent (a new or reset database, the agent pointed at another
cluster) those memories name jobs of the new database that they are not about.

Every command names the server's cluster (``cluster.server_identity``). The first id an agent is
told is adopted: its memory is taken to be of that cluster (an agent of the previous version had no
id to compare). When a command names another id than the one adopted, the agent

* stops every attempt it runs (they belong to the other database; SIGKILL, since no server will
  account for them) and reports nothing more about them;
* forgets the newest attempts of jobs, its recent exits and its undelivered reports about jobs
  (a registration still queued is kept: it says who the node is);
* moves the previous cluster's job dirs (logs, progress files, working directories) and its own
  checkpoints aside, so that a job with a reused id finds none of another job's files;
* adopts the new id, which every report it sends from then on names, and carries out the command.

Reports name the adopted id, so the server ignores what an agent sends before it learns of the new
database (its first heartbeats and queued reports after a restart).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from cluster import protocol, session_contract
from cluster.agent.attempt import Key
from cluster.agent.recent_exits import RecentExits
from cluster.protocol_versions import CLUSTER_ID_FIELD as FIELD

log = logging.getLogger(__name__)

#: Reports about one attempt of a job: dropped for the attempts of a cluster left behind.
ATTEMPT_REPORTS = frozenset({protocol.REPORT_STARTED, protocol.REPORT_EXITED, protocol.REPORT_LOG,
                             protocol.REPORT_PROGRESS, session_contract.REPORT_SESSION})
#: How long a switch waits for the previous cluster's attempts to be gone before it carries out the
#: command (a launch of a job id they share must not find one of them still here).
STOP_WAIT_S = 5.0


class ClusterMemory:
    """The adopted cluster id (``known``, "" before any) and the attempts whose reports are muted."""

    def __init__(self, known: str = "") -> None:
        self.known = known if isinstance(known, str) else ""
        self.muted: set[Key] = set()

    def to_state(self) -> dict[str, Any]:
        """What the state file keeps: the adopted id, and the attempts still muted (an attempt of the
        previous cluster that outlived the switch's wait must stay muted after an agent restart, or
        its exit would be reported as one of the new cluster's job with the same id)."""
        return {"cluster_id": self.known, "muted_attempts": sorted([job, attempt] for job, attempt in self.muted)}

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> ClusterMemory:
        """The memory ``to_state`` saved (an older state file has no muted attempts)."""
        memory = cls(state.get("cluster_id", ""))
        for item in state.get("muted_attempts") or ():
            if isinstance(item, list) and len(item) == 2 and isinstance(item[1], int):
                memory.muted.add((str(item[0]), item[1]))
        return memory

    def observe(self, command: Mapping[str, Any]) -> str | None:
        """Adopt the cluster a command names. Returns the id left behind when it names another one
        than the adopted id, else None (none named, the same one, or the first one adopted)."""
        named = command.get(FIELD)
        if not isinstance(named, str) or not named or named == self.known:
            return None
        previous, self.known = self.known, named
        return previous or None

    def tag(self, report: dict[str, Any]) -> dict[str, Any]:
        """``report`` naming the adopted cluster (unchanged before one is adopted)."""
        if self.known:
            report[FIELD] = self.known
        return report

    def mutes(self, task: str, report: Mapping[str, Any]) -> bool:
        """Whether a report is about an attempt of a cluster left behind (it is dropped). Its exit
        is the last report of an attempt: the attempt is unmuted then."""
        if task not in ATTEMPT_REPORTS or not self.muted:
            return False
        key = (str(report.get("job_id")), report.get("attempt"))
        if key not in self.muted:
            return False
        if task == protocol.REPORT_EXITED:
            self.muted.discard(key)  # type: ignore[arg-type]
        return True


class AgentParts(Protocol):
    """What a switch touches of ``cluster.agent.agent.Agent`` (named here, not imported: the agent
    imports this module)."""

    cluster: ClusterMemory
    supervisor: Any
    outbox: list[list[Any]]
    recent_exits: RecentExits
    config: Any
    _outbox_dirty: bool


def on_command(agent: AgentParts, command: Mapping[str, Any]) -> None:
    """Adopt the command's cluster id; forget the previous cluster's jobs when it is another one."""
    before = agent.cluster.known
    previous = agent.cluster.observe(command)
    if agent.cluster.known != before:
        agent.supervisor.dirty = True  # saved with the state once the command is handled
    if previous is not None:
        forget_previous(agent, previous)


def forget_previous(agent: AgentParts, previous: str) -> None:
    """What ``on_command`` does on a switch (see the module doc)."""
    supervisor = agent.supervisor
    running = list(supervisor.attempts)
    queued = [item for item in agent.outbox if item[0] in ATTEMPT_REPORTS]
    log.warning("node %s: the server's database is now cluster %s, not %s: stopping the %d job attempt(s) of "
                "the previous one, forgetting %d remembered job(s), %d recent exit(s) and %d undelivered report(s)",
                agent.config.name, agent.cluster.known, previous, len(running), len(supervisor.launches.newest),
                len(agent.recent_exits.current(time.time())), len(queued))
    agent.cluster.muted.update(running)
    supervisor.pending.waiting.clear()  # launches of the previous cluster waiting for an image: never started
    for job, attempt in running:
        supervisor.kill({"job_id": job, "attempt": attempt, "grace_period": 0.0, "reason": protocol.EXIT_STALE})
    give_up = time.monotonic() + STOP_WAIT_S
    while supervisor.attempts and time.monotonic() < give_up:
        supervisor.tick()
        time.sleep(0.02)
    _move_files_aside(agent, previous)
    supervisor.launches.clear()
    supervisor.dirty = True
    agent.recent_exits = RecentExits()
    agent.outbox = [item for item in agent.outbox if item[0] not in ATTEMPT_REPORTS]
    agent._outbox_dirty = True


def _move_files_aside(agent: AgentParts, previous: str) -> None:
    """Move the previous cluster's job dirs (logs, progress files, working dirs) and, when they are
    this agent's own, its checkpoints to ``<workdir>/previous-clusters/<id>-<time>/``: a new job with
    a reused id must not find another job's files in its working or checkpoint directory. Moved, not
    deleted, in case the switch was a mistake. A checkpoint root outside the work dir (shared by the
    nodes) is left as it is: each job's directory there is set aside when a job of the new cluster
    with its id is launched (checkpoint_owner.py)."""
    workdir = Path(agent.config.workdir).resolve()
    target = workdir / "previous-clusters" / f"{previous}-{int(time.time())}"
    for path in (workdir / "jobs", Path(agent.config.checkpoint_root).resolve()):
        if not path.is_relative_to(workdir):
            log.info("checkpoints of cluster %s stay in %s, outside this agent's work dir: each is set aside "
                     "when a job of the new cluster with its id starts", previous, path)
            continue
        if path.exists():
            target.mkdir(parents=True, exist_ok=True)
            path.rename(target / path.name)
            log.info("moved %s to %s", path, target / path.name)
