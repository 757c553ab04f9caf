"""Reads of cluster state for the portal."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime

from cluster.models import Gpu, Node


@dataclass(frozen=True, slots=True)
class GpuListing:
    index: int
    model_name: str
    memory_mb: int | None
    allocated: bool
    allocated_to: int | None


@dataclass(frozen=True, slots=True)
class NodeListing:
    name: str
    state: str
    gpus_declared: int
    gpu_views: list[GpuListing]
    free_gpus: int
    cpus: float
    mem_gb: float
    last_heartbeat: datetime | None
    agent_version: str
    protocol_version: int = 1

    @property
    def agent_outdated(self) -> bool:
        return agent_outdated(self.protocol_version)


def agent_outdated(protocol_version: int) -> bool:
    """Whether an agent speaking ``protocol_version`` is older than this server (a rolling upgrade's old node)."""
    import os

    from cluster import protocol_versions

    return protocol_version < protocol_versions.spoken_version(os.environ)


def nodes_for(user) -> list[NodeListing]:  # noqa: ANN001 - a user model instance
    """Every node with its GPUs, in two queries.

    Which job holds a GPU is shown only to staff and to that job's owner; other
    users see only that the GPU is taken, so job ids of others never leak. The GPU
    rows are read as plain columns with their holder's id and owner (at 1,000 nodes
    there are 8,000, and a model instance joined to each holder's whole row took
    half a second).
    """
    gpus: dict[int, list[GpuListing]] = defaultdict(list)
    rows = Gpu.objects.order_by("node_id", "index").values_list(
        "node_id", "index", "model_name", "memory_mb", "allocated_to_id", "allocated_to__owner_id")
    for node_id, index, model_name, memory_mb, job_id, owner_id in rows:
        visible = job_id is not None and (user.is_staff or owner_id == user.pk)
        gpus[node_id].append(GpuListing(index, model_name, memory_mb, job_id is not None, job_id if visible else None))
    return [
        NodeListing(node.name, node.state, node.gpus, gpus[node.pk], sum(not g.allocated for g in gpus[node.pk]),
                    node.cpus, node.mem_gb, node.last_heartbeat, node.agent_version, node.protocol_version)
        for node in Node.objects.order_by("name")
    ]


def expected_attempts(node_name: str) -> set[tuple[int, int]]:
    """``(job_id, attempt)`` of every attempt the database has running on ``node_name``.

    A job's GPUs on a node belong to its current attempt (``attempt_count``)
    until that attempt has vacated them, so the GPU rows answer the question
    in one query. Heartbeats and reconciliation compare an agent's processes
    with this set.
    """
    rows = (
        Gpu.objects.filter(node__name=node_name, allocated_to__isnull=False)
        .values_list("allocated_to_id", "allocated_to__attempt_count")
        .distinct()
    )
    return {(job_id, attempt) for job_id, attempt in rows}
