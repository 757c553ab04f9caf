"""The one policy interface, and the registry that selects policies by name.

The registry is the one module that knows every built-in policy: it imports
the policy classes, and no policy module imports it back (a policy imports only
its base classes and the core's data types), so the policies form no cycle with
their registry. A new policy is added to ``BUILTIN_POLICIES`` below.
"""

from __future__ import annotations

from typing import Callable, Mapping, Protocol

from scheduler.core.decisions import Decision
from scheduler.core.model import PendingJob, Snapshot
from scheduler.core.policies.fifo import Fifo, FifoStrict
from scheduler.core.policies.fitgpp import FitGpp
from scheduler.core.policies.fitgpp_shrink import FitGppShrink
from scheduler.core.policies.fixed_plan import FifoFixed, Synergy, Tiresias
from scheduler.core.policies.optimus import Optimus
from scheduler.core.policies.pollux import Pollux
from scheduler.core.policies.preemptive import PreemptNewest, PreemptRandom
from scheduler.core.policies.rubick import Rubick
from scheduler.core.policies.te_priority import TePriority
from scheduler.core.queue_order import by_priority, uniform_priority


class Policy(Protocol):
    """A scheduling policy.

    Contract: ``decide`` reads the snapshot and returns decisions; it never
    mutates the snapshot, never reads the wall clock or global random state,
    and for the same snapshot, time and constructor arguments returns the same
    decisions. The returned decisions are jointly feasible: applying all the
    ``Start`` decisions never puts more GPUs, CPUs or memory on a node than it
    has, counting resources still held by preempting jobs.

    A policy may also have ``queue_order(snapshot, now) -> list[PendingJob]``:
    every pending job, in the order its ``decide`` considers them; the queue
    positions shown to users come from it (``queue_order`` below).
    """

    name: str

    def decide(self, snapshot: Snapshot, now: float) -> list[Decision]: ...


PolicyFactory = Callable[..., Policy]

#: Every selectable policy class; each is selected by its ``name`` attribute.
BUILTIN_POLICIES: tuple[type, ...] = (
    Fifo,
    FifoStrict,
    TePriority,
    PreemptRandom,
    PreemptNewest,
    FitGpp,
    FitGppShrink,
    FifoFixed,
    Synergy,
    Tiresias,
    Rubick,
    Optimus,
    Pollux,
)


def _by_name(factories: tuple[type, ...]) -> Mapping[str, PolicyFactory]:
    """Index the policy classes by their ``name``; two classes may not share one."""
    table: dict[str, PolicyFactory] = {}
    for factory in factories:
        name = factory.name  # type: ignore[attr-defined]
        if name in table:
            raise ValueError(f"policy {name!r} registered twice")
        table[name] = factory
    return table


_REGISTRY: Mapping[str, PolicyFactory] = _by_name(BUILTIN_POLICIES)


def policy_names() -> list[str]:
    """The names ``make_policy`` accepts, sorted."""
    return sorted(_REGISTRY)


def simulator_only(name: str) -> str | None:
    """Why the policy registered as ``name`` cannot serve a live cluster (its class's
    ``simulator_only`` text), or None when it can or the name is unknown."""
    return getattr(_REGISTRY.get(name), "simulator_only", None)


def queue_order(policy: Policy, snapshot: Snapshot, now: float) -> list[PendingJob]:
    """Every pending job of ``snapshot`` in the order ``policy`` considers them: its own
    ``queue_order`` when it has one, else by priority, then arrival (the snapshot's order).
    Pure, like ``decide``: it changes neither the snapshot nor the policy."""
    own = getattr(policy, "queue_order", None)
    if own is not None:
        return list(own(snapshot, now))
    return list(by_priority(snapshot.pending, uniform_priority(snapshot)))


def make_policy(name: str, **params: object) -> Policy:
    """Build the policy registered as ``name``; ``params`` go to its constructor.

    Raises ``KeyError`` naming the known policies when ``name`` is unknown.
    """
    try:
        factory = _REGISTRY[name]
    except KeyError:
        raise KeyError(f"unknown policy {name!r}; known: {', '.join(sorted(_REGISTRY))}") from None
    return factory(**params)
