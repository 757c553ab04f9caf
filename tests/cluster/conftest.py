"""Fixtures for the cluster service tests (the agent's own tests live in tests/cluster/agent).

Nothing here imports Django at import time: the agent tests run without it.
"""

from __future__ import annotations

from tests.support.live_helpers import no_triggers, sent  # noqa: F401 - fixtures

