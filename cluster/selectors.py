"""Reads of cluster state for the portal."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db.models import Prefetch

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
    users see only that the GPU is taken, so job ids of others never leak.
    """
    gpus = Gpu.objects.select_related("allocated_to").order_by("index")
    nodes = Node.objects.prefetch_related(Prefetch("devices", queryset=gpus)).order_by("name")
    views = []
    for node in nodes:
        gpu_views = []
        for gpu in node.devices.all():
            job = gpu.allocated_to
            visible = job is not None and (user.is_staff or job.owner_id == user.pk)
            gpu_views.append(GpuListing(gpu.index, gpu.model_name, gpu.memory_mb, job is not None,
                                     job.pk if visible else None))
        views.append(
            NodeListing(node.name, node.state, node.gpus, gpu_views, sum(not g.allocated for g in gpu_views),
                     node.cpus, node.mem_gb, node.last_heartbeat, node.agent_version, node.protocol_version)
        )
    return views


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
