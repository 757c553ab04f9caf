"""Commands to node agents (AGENT_* in ``cluster.protocol``), sent through the broker.

Callers send commands only after the database transaction that decided them
has committed (``transaction.on_commit``), so an agent never acts on a
decision that was rolled back. Every command names ``(job_id, attempt)`` and
agents treat repeats as no-ops, so re-sending is always safe.

``send`` is the single exit point; tests replace it to observe commands.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from django.db import transaction

from cluster import auth, message_signing, protocol, protocol_versions, server_identity

log = logging.getLogger(__name__)

# A command is published at most this many times when the broker hiccups; a
# lost command is recovered by the periodic tick (overdue commands re-sent).
_RETRY_POLICY = {"max_retries": 3, "interval_start": 0, "interval_step": 0.2, "interval_max": 0.5}


def send(node: str, task: str, kwargs: dict[str, Any]) -> bool:
    """Publish ``task`` with ``kwargs`` on ``node``'s queue, signed with the node's token (its agent runs
    nothing else; ``cluster.message_signing``); False (logged) if the broker refused."""
    from cluster.broker import app

    kwargs = {**kwargs, protocol_versions.PROTOCOL_FIELD: server_protocol_version()}
    cluster = server_identity.known_id()
    if cluster is not None:
        kwargs[server_identity.FIELD] = cluster
    token = auth.signing_token(node)
    if token:  # None or REFUSE_ALL: no token to sign with (a development stack's agents take unsigned commands)
        kwargs = message_signing.signed(token, task, kwargs, time.time())
    try:
        app.send_task(task, kwargs=kwargs, queue=protocol.node_queue(node), retry=True, retry_policy=_RETRY_POLICY)
    except Exception:  # the broker is down; the tick re-sends what is overdue
        log.warning("could not send %s to node %s: %s", task, node, kwargs, exc_info=True)
        return False
    log.info("sent %s to node %s: %s", task, node, kwargs)
    return True


def server_protocol_version() -> int:
    """The protocol version this server speaks (``protocol.spoken_version``)."""
    import os

    return protocol_versions.spoken_version(os.environ)


def register_again(node: str) -> bool:
    """Ask ``node``'s agent to register again: its heartbeats come from a node the database does not
    know (a database restored from a backup taken before the node registered)."""
    return send(node, protocol.AGENT_REGISTER_AGAIN, {})


def refuse(node: str, reason: str) -> bool:
    """Tell ``node``'s agent that its messages are refused (a protocol version this server does not accept)."""
    return send(node, protocol_versions.AGENT_REFUSED, {"reason": reason})


def launch_for(job: Any, attempt: int, gpu_indices: Iterable[int], *, command: str | None = None,
               **fields: Any) -> protocol.LaunchCommand:
    """The AGENT_LAUNCH of ``attempt`` of ``job`` (anything with pk, grace_period, time_limit,
    and command unless ``command`` gives it) on one node's ``gpu_indices``; attempts after the
    first resume. ``fields``: the plan fields of a reconfigurable job
    (``scheduler.elastic.launch_fields``) and the node-rank fields (``launches_for`` fills them)."""
    return protocol.LaunchCommand(
        job_id=job.pk,
        attempt=attempt,
        command=job.command if command is None else command,
        gpu_indices=tuple(gpu_indices),
        grace_period=float(job.grace_period),
        time_limit=float(job.time_limit) if job.time_limit is not None else None,
        resume=attempt > 1,
        **fields,
    )


def launches_for(
    job: Any, attempt: int, allocation: Mapping[str, Iterable[int]], addresses: Mapping[str, str], *,
    command: str | None = None, **plan: Any
) -> list[tuple[str, protocol.LaunchCommand]]:
    """One ``(node, AGENT_LAUNCH)`` per node of ``allocation`` ({node: local GPU indices});
    ``command`` as for ``launch_for``.

    Ranks follow the node names sorted: the order does not depend on how the
    allocation was stored (a JSON object's key order is not kept by
    PostgreSQL), so a launch re-sent by the tick names the same ranks. Rank 0's
    advertised address (``addresses``; the node's name when absent) and the
    attempt's ``protocol.master_port``, keyed by its first GPU on rank 0's node so
    that no other job running there has the same, are the rendezvous point of
    every rank. A re-sent launch has the same allocation, so the same port.
    """
    allocation = {node: list(gpus) for node, gpus in allocation.items()}
    nodes = tuple(sorted(allocation))
    if not nodes:
        return []
    master_addr = addresses.get(nodes[0]) or nodes[0]
    port = protocol.master_port(job.pk, attempt, min(allocation[nodes[0]], default=0))
    return [
        (node, launch_for(job, attempt, allocation[node], command=command, nodes=nodes, node_rank=rank,
                          master_addr=master_addr, master_port=port, **plan))
        for rank, node in enumerate(nodes)
    ]


def node_addresses(names: Iterable[str]) -> dict[str, str]:
    """``{name: advertised address}`` of the nodes ``names`` (one query); a node without one maps to its name."""
    from cluster.models import Node

    return {name: address or name for name, address in
            Node.objects.filter(name__in=set(names)).values_list("name", "address")}


def launch(node: str, command: protocol.LaunchCommand) -> bool:
    return send(node, protocol.AGENT_LAUNCH, command.to_kwargs())


def preempt(node: str, job_id: int, attempt: int, grace_period: float) -> bool:
    return send(node, protocol.AGENT_PREEMPT, {"job_id": job_id, "attempt": attempt, "grace_period": float(grace_period)})


def kill(node: str, job_id: int, attempt: int, grace_period: float, reason: str) -> bool:
    """AGENT_KILL; ``reason`` is one of protocol.EXIT_CANCEL, EXIT_TIMEOUT, EXIT_STALE."""
    return send(
        node,
        protocol.AGENT_KILL,
        {"job_id": job_id, "attempt": attempt, "grace_period": float(grace_period), "reason": reason},
    )


def reconcile(node: str, keep: Iterable[tuple[int, int]]) -> bool:
    """AGENT_RECONCILE: the agent stops every attempt it runs that is not in ``keep``."""
    return send(node, protocol.AGENT_RECONCILE, {"keep": [[job, attempt] for job, attempt in sorted(keep)]})


def on_commit(sends: list[Callable[[], object]]) -> None:
    """Send agent commands after the commit, all from one callback (one per command cost
    ~0.1 ms each to register at thousands per cycle). Commands never raise: a command
    the broker refuses is logged and the tick re-sends it, so one cannot stop the others."""
    if sends:
        transaction.on_commit(lambda: [send() for send in sends])
