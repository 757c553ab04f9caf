"""Fixtures of the adversarial suite.

The portal tests' users, clients, jobs and nodes (tests/portal/conftest.py),
the dashboard tests' WebSocket helpers (tests/portal/dashboard/conftest.py) and
the recorded agent commands (tests/support/live_helpers.py) are reused as they are.
The live tests get a private Redis (``private_redis``, tests/conftest.py) and the system's own
processes on the test database (``live_stack``, from ``tests/adversarial/stack.py``).
"""

from __future__ import annotations

import pytest

from tests.adversarial import stack as stack_module
from tests.conftest import unavailable
from tests.support.live_helpers import no_triggers, sent  # noqa: F401 - fixtures
from tests.support.web import api_as, browser_as, make_job, make_node, password, roles, token_for  # noqa: F401
from tests.support.websockets import memory_layer, ws_connect  # noqa: F401


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "persistent_redis: the test's private Redis keeps an append-only file")
    config.addinivalue_line("markers", "multihost: runs the system over network-namespace hosts (root, iproute2)")


@pytest.fixture
def test_database_url(transactional_db) -> str:  # noqa: ANN001
    """pytest-django's test database as a URL for the processes a test starts (they see committed rows)."""
    from django.db import connection

    db = connection.settings_dict
    auth = db["USER"] + (f":{db['PASSWORD']}" if db.get("PASSWORD") else "")
    if "postgresql" not in db["ENGINE"]:
        unavailable("the adversarial live tests need PostgreSQL: set DATABASE_URL=postgres://...")
    return f"postgres://{auth}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


@pytest.fixture
def live_stack(tmp_path, private_redis, test_database_url, request):  # noqa: ANN001, ANN201
    """The system's processes of one test, on the test database and a private Redis; torn down
    with every job process its agents started. Diagnostics are printed when the test failed."""
    stack = stack_module.Stack(tmp_path, test_database_url, private_redis.url)
    try:
        yield stack
    finally:
        report = getattr(request.node, "rep_call", None)
        if report is not None and report.failed:
            import sys

            sys.stderr.write(stack.diagnostics())
        stack.stop_all()
        stack.kill_jobs()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):  # noqa: ANN001, ANN201
    outcome = yield
    report = outcome.get_result()
    if report.when == "call":
        item.rep_call = report
