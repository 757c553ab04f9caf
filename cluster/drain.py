"""Draining a node: no new attempt starts there; what runs there finishes.

``drain`` moves a node from UP to DRAINING (conditionally, so a node that is
lost meanwhile stays lost). The scheduling loop offers only UP nodes' GPUs
(scheduler/snapshot.py) and allocates only on UP nodes (scheduler/apply.py),
so from the next cycle on nothing new starts there, while attempts already
running keep their GPUs, report and end as usual. ``undrain`` returns a
DRAINING node to service. A drained node is one that is DRAINING and holds
no GPU any more: it can then be stopped for maintenance.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db import transaction

from cluster.models import Gpu, Node, NodeState
from scheduler.triggers import request_scheduling


class DrainError(Exception):
    """The node is missing or in a state that cannot be drained or undrained."""


@dataclass(frozen=True, slots=True)
class DrainStatus:
    node: str
    state: str
    busy_gpus: int
    jobs: tuple[int, ...]

    @property
    def drained(self) -> bool:
        return self.state == NodeState.DRAINING and self.busy_gpus == 0


def status(name: str) -> DrainStatus:
    node = Node.objects.filter(name=name).first()
    if node is None:
        raise DrainError(f"no node named {name!r}")
    held = list(Gpu.objects.filter(node=node, allocated_to__isnull=False).values_list("allocated_to", flat=True))
    return DrainStatus(node.name, node.state, len(held), tuple(sorted(set(held))))


def drain(name: str) -> DrainStatus:
    """UP -> DRAINING (DRAINING stays DRAINING); anything else is refused."""
    with transaction.atomic():
        if Node.objects.filter(name=name, state=NodeState.UP).update(state=NodeState.DRAINING) != 1:
            current = Node.objects.filter(name=name).values_list("state", flat=True).first()
            if current is None:
                raise DrainError(f"no node named {name!r}")
            if current != NodeState.DRAINING:
                raise DrainError(f"node {name} is {current}; only an UP node can be drained")
    return status(name)


def undrain(name: str) -> DrainStatus:
    """DRAINING -> UP (UP stays UP); a cycle follows so waiting jobs may use the node."""
    with transaction.atomic():
        if Node.objects.filter(name=name, state=NodeState.DRAINING).update(state=NodeState.UP) != 1:
            current = Node.objects.filter(name=name).values_list("state", flat=True).first()
            if current is None:
                raise DrainError(f"no node named {name!r}")
            if current != NodeState.UP:
                raise DrainError(f"node {name} is {current}; only a DRAINING node can return to service")
        transaction.on_commit(request_scheduling)
    return status(name)
