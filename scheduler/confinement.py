"""What a launch tells the node to confine a job with: its user, its limits, its image.

The agent runs each attempt as ``run_as`` (resolved on the node through NSS),
in a cgroup limited to ``cpus`` and ``mem_bytes`` (0: no limit), and, when the
job names an image, inside that image's root filesystem (``image_uri`` is the
tarball on shared storage, ``image_digest`` what the node verifies). The node
side is described in docs/agent.md, the threat model in docs/security.md.

``mem_bytes`` is the request's ``mem_gb`` in GiB (2**30 bytes), the unit the
scheduler's bookkeeping assumes for node memory too.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.conf import settings

from cluster import session_seal
from scheduler.identity import single_user_mode
from scheduler.models import Job

GIB = 2**30
_COLUMNS = ("id", "run_as", "num_cpus", "mem_gb", "image__name", "image__uri", "image__digest", "session_kind")
# The launch env variables that make an attempt an interactive session, and give the agent the key to
# seal its secret to (cluster/session_contract.py, cluster/session_seal.py).
_SESSION_ENV = "GPUSCHED_SESSION"
_SESSION_REPORT_KEY_ENV = "GPUSCHED_SESSION_REPORT_KEY"


def launch_fields(job_ids: Iterable[int]) -> dict[int, dict[str, Any]]:
    """``{job id: LaunchCommand confinement fields}`` for ``job_ids``, in one query."""
    ids = set(job_ids)
    if not ids:
        return {}
    return {row["id"]: fields_of(row) for row in Job.objects.filter(pk__in=ids).values(*_COLUMNS)}


def fields_of(row: dict[str, Any]) -> dict[str, Any]:
    """The confinement fields of one job, from its values() row (``_COLUMNS``).

    In single-user mode ``run_as`` is empty whatever the job stored: the agent
    then runs the job as itself, which it does only when it runs in that mode too.
    An interactive session's kind travels in the launch's ``env`` (docs/sessions.md), with the
    server's public key that the node seals the session's secret to.
    """
    extra = {}
    if row.get("session_kind"):
        extra["env"] = {_SESSION_ENV: row["session_kind"],
                        _SESSION_REPORT_KEY_ENV: session_seal.public_key_text(settings.SECRET_KEY)}
    return {**extra,
        "run_as": "" if single_user_mode() else row["run_as"],
        "cpus": float(row["num_cpus"] or 0.0),
        "mem_bytes": round((row["mem_gb"] or 0.0) * GIB),
        "image": row["image__name"] or "",
        "image_uri": row["image__uri"] or "",
        "image_digest": row["image__digest"] or "",
    }
