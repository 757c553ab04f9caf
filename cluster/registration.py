"""Agent registration: a node and its GPU rows are created or updated when its agent starts."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime

from django.db import transaction

from audit import services as audit
from audit.models import Action
from cluster import commands, overdue
from cluster.models import AGENT_VERSION_LENGTH, GPU_MODEL_LENGTH, Gpu, Node, NodeState
from cluster.selectors import expected_attempts
from scheduler import triggers

log = logging.getLogger(__name__)


def register_node(
    name: str, *, gpus: int, cpus: float, mem_gb: float, gpu_models: Sequence[str], agent_version: str, now: datetime,
    address: str = "", protocol_version: int = 1,
) -> Node:
    """Create or update the node and its GPU rows; a node that was lost is UP again.

    ``address`` is where other nodes reach this one (validated by the caller,
    ``protocol.check_address``); an agent that sends none is reached by its name.
    ``protocol_version`` is the one its agent speaks (accepted by the caller).

    The agent is then told to keep exactly the attempts the database has on
    the node (AGENT_RECONCILE): after a restart or a loss, anything else it
    still runs is stale and is stopped; and it is sent again the launches of
    the attempts still starting there (``overdue.resend_launches_to``).
    """
    with transaction.atomic():
        node, created = Node.objects.select_for_update().get_or_create(
            name=name, defaults={"gpus": gpus, "cpus": cpus, "mem_gb": mem_gb, "registered_at": now}
        )
        came_back = node.state == NodeState.NODE_LOST
        node.gpus, node.cpus, node.mem_gb = gpus, cpus, mem_gb
        node.agent_version = agent_version[:AGENT_VERSION_LENGTH]
        node.address = address or name
        node.protocol_version = protocol_version
        node.last_heartbeat = now
        if came_back:
            node.state = NodeState.UP
        node.save()
        _sync_gpus(node, gpu_models)
        audit.record(Action.AGENT_REGISTERED, target=f"node {name}", actor_name=f"node {name}",
                     detail=f"{'new' if created else 'known'}: {gpus} GPUs, agent {agent_version or '?'}, "
                            f"address {node.address}")
        transaction.on_commit(lambda: commands.reconcile(name, expected_attempts(name)))
        transaction.on_commit(lambda: overdue.resend_launches_to(name))
        transaction.on_commit(triggers.request_scheduling)
    log.info("node %s registered (%s): %d GPUs, protocol version %d%s%s", name, "new" if created else "known", gpus,
             protocol_version, " (older than this server's: upgrade its agent)"
             if protocol_version < commands.server_protocol_version() else "",
             ", back from NODE_LOST" if came_back else "")
    return node


def _sync_gpus(node: Node, gpu_models: Sequence[str]) -> None:
    """GPU rows 0..gpus-1 exist with their model names; free rows beyond the count go."""
    existing = {g.index: g for g in node.devices.all()}
    for index in range(node.gpus):
        model = gpu_models[index] if index < len(gpu_models) else ""
        gpu = existing.get(index)
        if gpu is None:
            Gpu.objects.create(node=node, index=index, model_name=model[:GPU_MODEL_LENGTH])
        elif gpu.model_name != model[:GPU_MODEL_LENGTH]:
            Gpu.objects.filter(pk=gpu.pk).update(model_name=model[:GPU_MODEL_LENGTH])
    # A GPU still held stays until its attempt vacates; the snapshot ignores indices >= gpus.
    Gpu.objects.filter(node=node, index__gte=node.gpus, allocated_to__isnull=True).delete()
