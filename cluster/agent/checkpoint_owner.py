"""Which cluster a job's checkpoint directory belongs to, and setting aside another cluster's.

A job's ``CHECKPOINT_DIR`` is ``<checkpoint root>/<job id>``, and job ids start again at 1 in a new
server database. An agent that sees its server's database replaced moves its own work dir's
checkpoints aside (``cluster_switch.py``), but a checkpoint root shared by the nodes (network
storage, what lets a preempted job resume on another node) outlives any one agent: job 1 of the new
database would find job 1 of the old one's files there, and resume from a stranger's checkpoint,
which confined agents hand over to the new job's user.

So every launch claims its checkpoint directory for the cluster that sent it: the agent keeps one
small file per job, ``<root>/.clusters/<job id>``, naming that cluster (``cluster.server_identity``;
kept where no job can write, 0700). A directory whose file names another cluster is moved to
``<root>/.previous-clusters/<that cluster>/<job id>-<unix time>`` before the job starts (moved, not
deleted, in case the change of database was a mistake), and the job gets a new, empty one. A
directory without such a file (made before agents kept them) is claimed as it is, so an upgrade
loses no job's checkpoints. Names starting with ``.`` are never job ids (``protocol.check_job_id``).
"""

from __future__ import annotations

import logging
import os
import re
import time
from pathlib import Path

log = logging.getLogger(__name__)

TAGS = ".clusters"
PREVIOUS = ".previous-clusters"
PRIVATE = 0o700
# The server's cluster ids are UUIDs; anything else is not used as a file name.
_CLUSTER_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]{0,63}")


def _private_dir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    os.chmod(path, PRIVATE)
    return path


def owner(root: Path, job: str) -> str | None:
    """The cluster the checkpoint directory of ``job`` was last claimed for (None: never claimed)."""
    try:
        return (root / TAGS / job).read_text().strip() or None
    except FileNotFoundError:
        return None


def claim(root: Path, job: str, cluster_id: object) -> Path | None:
    """Claim ``<root>/<job>`` for ``cluster_id`` before a launch of ``job`` uses it. Returns where
    another cluster's directory was moved (None when there was none to move). Does nothing for a
    missing or malformed cluster id (a server that names none)."""
    if not isinstance(cluster_id, str) or not _CLUSTER_ID.fullmatch(cluster_id):
        return None
    previous = owner(root, job)
    if previous == cluster_id:
        return None
    moved = None
    directory = root / job
    if previous is not None and directory.exists():
        safe = previous if _CLUSTER_ID.fullmatch(previous) else "unknown"
        _private_dir(root / PREVIOUS)
        target = _private_dir(root / PREVIOUS / safe) / f"{job}-{int(time.time())}"
        try:
            directory.rename(target)
            moved = target
            log.info("checkpoints of job %s of cluster %s moved to %s: job %s of cluster %s starts without them",
                     job, previous, target, job, cluster_id)
        except FileNotFoundError:
            pass  # another node of a multi-node launch moved it first
    tags = _private_dir(root / TAGS)
    fresh = tags / f".{job}.{os.getpid()}"
    fresh.write_text(cluster_id + "\n")
    fresh.replace(tags / job)
    return moved
