"""Fixtures of the adversarial suite.

The portal tests' users, clients, jobs and nodes (tests/portal/conftest.py),
the dashboard tests' WebSocket helpers (tests/portal/dashboard/conftest.py) and
the recorded agent commands (tests/live_helpers.py) are reused as they are.
The fault tests' private services and live stacks are in ``tests/adversarial/stack.py``.
"""

from __future__ import annotations

from tests.live_helpers import no_triggers, sent  # noqa: F401 - fixtures
from tests.portal.conftest import api_as, browser_as, make_job, make_node, password, roles, token_for  # noqa: F401
from tests.portal.dashboard.conftest import memory_layer, ws_connect  # noqa: F401
