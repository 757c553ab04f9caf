"""The one policy interface, and the registry that selects policies by name."""

from __future__ import annotations

from typing import Callable, Protocol

from scheduler.core.decisions import Decision
from scheduler.core.model import Snapshot


class Policy(Protocol):
    """A scheduling policy.

    Contract: ``decide`` reads the snapshot and returns decisions; it never
    mutates the snapshot, never reads the wall clock or global random state,
    and for the same snapshot, time and constructor arguments returns the same
    decisions. The returned decisions are jointly feasible: applying all the
    ``Start`` decisions never puts more GPUs, CPUs or memory on a node than it
    has, counting resources still held by preempting jobs.
    """

    name: str

    def decide(self, snapshot: Snapshot, now: float) -> list[Decision]: ...


PolicyFactory = Callable[..., Policy]

_REGISTRY: dict[str, PolicyFactory] = {}


def register(name: str) -> Callable[[PolicyFactory], PolicyFactory]:
    """Class decorator: make a policy selectable by ``name``."""

    def wrap(factory: PolicyFactory) -> PolicyFactory:
        if name in _REGISTRY:
            raise ValueError(f"policy {name!r} registered twice")
        _REGISTRY[name] = factory
        return factory

    return wrap


def policy_names() -> list[str]:
    _load_builtin_policies()
    return sorted(_REGISTRY)


def make_policy(name: str, **params: object) -> Policy:
    """Build the policy registered as ``name``; ``params`` go to its constructor.

    Raises ``KeyError`` naming the known policies when ``name`` is unknown.
    """
    _load_builtin_policies()
    try:
        factory = _REGISTRY[name]
    except KeyError:
        raise KeyError(f"unknown policy {name!r}; known: {', '.join(sorted(_REGISTRY))}") from None
    return factory(**params)


def _load_builtin_policies() -> None:
    # Imported lazily so that the policy modules can import this one.
    import scheduler.core.policies  # noqa: F401
