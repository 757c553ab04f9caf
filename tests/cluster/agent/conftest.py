"""Fixtures for the node agent tests: real agents, real job processes, real Redis.

The agent tests use their own Redis database (AGENT_TEST_REDIS_URL, default:
the project's test Redis URL with database 3) because they read the default
"celery" queue, where reports land: a portal worker consuming that queue on the
same database would take the reports these tests wait for, and vice versa.

Every agent and every job process group a test starts is killed at teardown,
whatever the test's outcome.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlparse

import pytest
from tests.cluster.agent.agent_testlib import Harness, Node, kill_group

from cluster import protocol


@pytest.fixture(scope="session")
def agent_broker_url() -> str:
    url = os.environ.get("AGENT_TEST_REDIS_URL")
    if not url:
        base = os.environ.get("TEST_REDIS_URL") or os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/0"
        url = urlparse(base)._replace(path="/3").geturl()
    import redis

    try:
        redis.Redis.from_url(url, socket_connect_timeout=2).ping()
    except redis.RedisError as exc:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"Redis at {url} unreachable ({exc})", pytrace=False)
        pytest.skip(f"Redis at {url} unreachable ({exc}); start redis-server or set AGENT_TEST_REDIS_URL")
    return url


@pytest.fixture
def make_node(agent_broker_url: str, tmp_path: Path) -> Iterator[Callable[..., Node]]:
    """Factory of Node objects (agent not yet started); all are cleaned up."""
    nodes: list[Node] = []

    def make(*extra_args: str, url: str | None = None, default_queue: bool = False) -> Node:
        node = Node(url or agent_broker_url, tmp_path, list(extra_args), default_queue=default_queue)
        nodes.append(node)
        return node

    yield make
    for node in nodes:
        node.cleanup()


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator["PrivateRedis"]:
    """A redis-server of the test's own, which the test may stop and restart."""
    from tests.cluster.agent.agent_testlib import PrivateRedis

    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed")
    server = PrivateRedis(tmp_path)
    server.start()
    yield server
    server.stop()


@pytest.fixture
def node(make_node: Callable[..., Node]) -> Node:
    """A running agent with 2 virtual GPUs, registered."""
    n = make_node()
    n.start()
    n.reports.wait(protocol.REPORT_REGISTER)
    return n


@pytest.fixture
def h(tmp_path: Path) -> Iterator[Harness]:
    """A supervisor without an agent; every process group it started is killed at teardown."""
    harness = Harness(tmp_path)
    yield harness
    for _, kw in harness.reports:
        if "pid" in kw:
            kill_group(kw["pid"])
    for att in harness.sup.attempts.values():
        kill_group(att.pgid)
