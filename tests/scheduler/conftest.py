"""Fixtures for the scheduling-loop tests: captured agent commands, a user, nodes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.live_helpers import SentCommands, make_node, make_user


@pytest.fixture
def sent(monkeypatch) -> SentCommands:  # noqa: ANN001
    """Agent commands are recorded here instead of being published to the broker."""
    from cluster import commands

    box = SentCommands()
    monkeypatch.setattr(commands, "send", box.record)
    return box


@pytest.fixture
def no_triggers(monkeypatch) -> list[str]:  # noqa: ANN001
    """Scheduling requests made by services are counted instead of enqueued."""
    import cluster.services

    calls: list[str] = []
    monkeypatch.setattr(cluster.services, "request_scheduling", lambda: calls.append("cycle") or True)
    return calls


@pytest.fixture
def alice(db) -> Any:  # noqa: ANN001
    return make_user("alice")


@pytest.fixture
def nodes(db) -> Callable[..., Any]:  # noqa: ANN001
    """``nodes(("n1", 2), ("n2", 2))``: UP nodes with virtual GPUs."""

    def make(*specs: tuple[str, int]) -> list[Any]:
        return [make_node(name, gpus) for name, gpus in specs]

    return make
