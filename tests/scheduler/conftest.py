"""Fixtures for the scheduling-loop tests: captured agent commands, a user, nodes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.support.live_helpers import make_node, make_user, no_triggers, sent  # noqa: F401 - fixtures


@pytest.fixture
def alice(db) -> Any:  # noqa: ANN001
    return make_user("alice")


@pytest.fixture
def nodes(db) -> Callable[..., Any]:  # noqa: ANN001
    """``nodes(("n1", 2), ("n2", 2))``: UP nodes with virtual GPUs."""

    def make(*specs: tuple[str, int]) -> list[Any]:
        return [make_node(name, gpus) for name, gpus in specs]

    return make


@pytest.fixture
def staff(db) -> Any:  # noqa: ANN001
    """A staff user (not superuser) who owns no job."""
    return make_user("admin1", is_staff=True)
