"""Shared test policy: real services, and what happens when one is missing.

Tests that touch the database use the one ``DATABASE_URL`` selects (through
pytest-django, which creates ``test_<name>``); tests marked ``redis`` use the
Redis at ``REDIS_URL`` (the ``redis_url`` fixture). When a service cannot be
reached the test is skipped with a message saying how to provide it, except
when ``CI=true``: then it fails, so a CI run never passes by skipping. CI also
refuses to run database tests on anything but PostgreSQL.

This module imports no Django at import time: the core, simulator and agent
tests run without Django's plugin.
"""

from __future__ import annotations

import os
from typing import NoReturn
from urllib.parse import urlparse

import pytest

# The live system (worker, agents) of the end-to-end and browser tests: one plugin, so one
# definition of its fixtures and at most one worker per session, whichever directories run.
# Users in their roles, clients, jobs and nodes (tests.support.web) and the in-memory channel
# layer (tests.support.websockets) serve the tests of portal/, scheduler/ and cluster/ alike.
pytest_plugins = ["tests.support.livestack", "tests.support.web", "tests.support.websockets",
                  "tests.support.session_server", "tests.support.sessions"]

IN_CI = os.environ.get("CI", "").strip().lower() == "true"
DEFAULT_TEST_REDIS_URL = "redis://127.0.0.1:6379/0"

# Fixtures that reach the database even without the django_db mark.
_DB_FIXTURES = {"db", "transactional_db", "live_server", "admin_user", "admin_client", "django_db_reset_sequences",
                "django_db_serialized_rollback"}

_service_problems: dict[str, str | None] = {}


@pytest.fixture(autouse=True)
def _metrics_count_afresh() -> None:
    """/metrics counts the settled part of its history once per process (``portal.dashboard.start_latency``);
    each test's database starts empty, so each test's count starts afresh."""
    import sys

    module = sys.modules.get("portal.dashboard.start_latency")
    if module is not None:
        module.SETTLED.forget()


def unavailable(message: str) -> NoReturn:
    """Skip, or under CI=true fail, because a service the test needs is missing."""
    if IN_CI:
        pytest.fail(f"{message} (CI=true: a missing service fails the test)", pytrace=False)
    pytest.skip(message)


@pytest.fixture
def pollux_profiles(settings):  # noqa: ANN001, ANN201 - pytest-django's settings
    """The Pollux study's application profiles (adaptive jobs), read from the shared traces:
    skip without them, fail under CI=true; the cache is emptied before and after."""
    from scheduler import adaptive_jobs
    from tests.scheduler.sim.workloads.pollux_traces import pollux_root

    settings.GPUSCHED_TRACES_DIR = str(pollux_root().parent)
    adaptive_jobs.reset_cache()
    yield
    adaptive_jobs.reset_cache()


@pytest.fixture
def perf_model_traces() -> None:
    """The Rubick traces the performance model is fitted from (this process and the live
    workers read the same folder): skip without them, fail under CI=true."""
    from scheduler import elastic

    elastic.reset_cache()
    if elastic.iter_times() is None:
        unavailable(f"Rubick traces not found at {elastic.traces_root()} (set GPUSCHED_TRACES_DIR)")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "postgres: needs PostgreSQL (DATABASE_URL=postgres://...)")
    config.addinivalue_line("markers", "redis: needs the Redis server at REDIS_URL")


def _database_problem() -> str | None:
    """Why the configured database cannot be used for tests, or None."""
    from django.conf import settings

    db = settings.DATABASES["default"]
    if "postgresql" not in db["ENGINE"]:
        if IN_CI:
            return "CI runs the database tests on PostgreSQL: set DATABASE_URL=postgres://..."
        return None
    import psycopg

    try:
        psycopg.connect(
            host=db.get("HOST") or None, port=db.get("PORT") or None, user=db.get("USER") or None,
            password=db.get("PASSWORD") or None, dbname="postgres", connect_timeout=3,
        ).close()
    except psycopg.Error as exc:
        return f"PostgreSQL at {db.get('HOST')}:{db.get('PORT')} is unreachable ({str(exc).strip()[:200]})"
    return None


def _redis_problem(url: str) -> str | None:
    import redis

    try:
        redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=2).ping()
    except redis.RedisError as exc:
        return f"Redis at {url} is unreachable ({exc}); start redis-server or set REDIS_URL"
    return None


def _is_postgres() -> bool:
    from django.conf import settings

    return "postgresql" in settings.DATABASES["default"]["ENGINE"]


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    if not item.config.pluginmanager.hasplugin("django"):
        return
    needs_db = item.get_closest_marker("django_db") is not None or bool(_DB_FIXTURES & set(item.fixturenames))
    if needs_db:
        if "database" not in _service_problems:
            _service_problems["database"] = _database_problem()
        if _service_problems["database"]:
            unavailable(_service_problems["database"])
    if item.get_closest_marker("postgres") and not _is_postgres():
        unavailable("needs PostgreSQL: set DATABASE_URL=postgres://postgres@127.0.0.1:5432/<name>")


def configured_redis_url() -> str:
    """The Redis URL tests use: TEST_REDIS_URL, else REDIS_URL, else the local default."""
    return os.environ.get("TEST_REDIS_URL") or os.environ.get("REDIS_URL") or DEFAULT_TEST_REDIS_URL


@pytest.fixture
def redis_url() -> str:
    """A reachable Redis URL (skip or, under CI, fail when there is none)."""
    url = configured_redis_url()
    if urlparse(url).scheme not in {"redis", "rediss", "unix"}:
        pytest.fail(f"REDIS_URL={url!r} is not a redis:// URL", pytrace=False)
    key = f"redis:{url}"
    if key not in _service_problems:
        _service_problems[key] = _redis_problem(url)
    if _service_problems[key]:
        unavailable(_service_problems[key])
    return url


@pytest.fixture
def private_redis(tmp_path, request):  # noqa: ANN001, ANN201
    """A redis-server of this test alone (skipped, or failed under CI, without the binary), for tests
    that restart it or change server-wide state such as ACL users; with the persistent_redis mark it
    runs with an append-only file, as a production Redis should. ``private_redis.start_another(args,
    where)`` starts one more with extra redis-server options (stopped with the test)."""
    from tests.adversarial.stack import RedisServer, ServiceUnavailable

    persist = request.node.get_closest_marker("persistent_redis") is not None
    servers: list[RedisServer] = []

    def start(args: tuple[str, ...] = (), where: str = "redis") -> RedisServer:
        try:
            server = RedisServer(tmp_path / where, persist=persist, args=args).start()
        except ServiceUnavailable as exc:
            unavailable(str(exc))
        servers.append(server)
        return server

    first = start()
    first.start_another = start  # type: ignore[attr-defined]
    yield first
    for server in servers:
        server.stop()
