"""Fixtures for the cluster service tests (the agent's own tests live in tests/cluster/agent).

Nothing here imports Django at import time: the agent tests run without it.
"""

from __future__ import annotations

import pytest

from tests.support.live_helpers import no_triggers, sent  # noqa: F401 - fixtures


@pytest.fixture
def private_redis(tmp_path):  # noqa: ANN001, ANN201
    """A redis-server of this test alone, for tests that change server-wide state such as ACL users
    (skipped, or failed under CI, without the binary). ``private_redis.start_another(args)`` starts
    one more with extra options (stopped with the test)."""
    from tests.adversarial.stack import RedisServer, ServiceUnavailable
    from tests.conftest import unavailable

    servers: list[RedisServer] = []

    def start(args: tuple[str, ...] = (), where: str = "redis") -> RedisServer:
        try:
            server = RedisServer(tmp_path / where, args=args).start()
        except ServiceUnavailable as exc:
            unavailable(str(exc))
        servers.append(server)
        return server

    first = start()
    first.start_another = start  # type: ignore[attr-defined]
    yield first
    for server in servers:
        server.stop()
