"""Browser tests: Playwright driving Debian's Chromium against the real system.

The system under test is the one the end-to-end tests run (the fixtures of the
live-stack plugin, ``tests/support/livestack.py``, shared with them): a Celery worker with beat
on pytest-django's test database and real node agents, plus, started here, the
portal itself under daphne (HTTP and WebSockets through ``portal.asgi``) with
the same settings. Each test saves screenshots of the pages it visits under
``artifacts/screenshots/`` (git-ignored).

Needs: PostgreSQL, Redis, ``/usr/bin/chromium`` and the ``playwright`` Python
package (its own browser download is not used). A missing piece skips the
tests with a message, or fails them under ``CI=true``.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import unavailable
from tests.support.livestack import PY, REPO, WORKER_ENV, _database_url, _stop_group, stack_secret_key, wait_until

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
    "--disable-sync", "--disable-quic", "--no-first-run",
]
SCREENSHOTS = REPO / "artifacts" / "screenshots"
PASSWORD = "a-long-browser-test-password-7"
#: How long a page may take to show a pushed change. A guard against hanging, not a latency target.
UI_WAIT_MS = 60_000

def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if Path(str(item.fspath)).is_relative_to(here):
            item.add_marker(pytest.mark.browser)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class WebServer:
    """The portal under daphne; ``restart()`` drops every WebSocket, as a deploy or a crash would."""

    url: str
    port: int
    env: dict[str, str]
    log_path: Path
    process: subprocess.Popen | None = None

    def start(self) -> None:
        with open(self.log_path, "ab") as out:
            self.process = subprocess.Popen(
                [PY, "-m", "daphne", "-b", "127.0.0.1", "-p", str(self.port), "portal.asgi:application"],
                cwd=REPO, env=self.env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            )
        wait_until(self._answers, "the web server to answer")

    def _answers(self) -> bool:
        if self.process is not None and self.process.poll() is not None:
            pytest.fail(f"daphne exited:\n{self.output()[-3000:]}")
        try:
            with urllib.request.urlopen(self.url + "/accounts/login/", timeout=2) as response:
                return response.status == 200
        except OSError:
            return False

    def stop(self) -> None:
        if self.process is not None:
            _stop_group(self.process)
            self.process = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def output(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


@contextmanager
def running_web(redis_url: str, tmp_path_factory, **extra_env: str) -> Iterator[WebServer]:  # noqa: ANN001
    """The portal under daphne on the test database, with ``extra_env`` beside the usual settings."""
    # The server runs with Django's async-safety check on, whichever fixture started first.
    env = {k: v for k, v in os.environ.items()
           if k not in ("CELERY_BROKER_URL", "TEST_REDIS_URL", "DJANGO_ALLOW_ASYNC_UNSAFE")}
    env.update(WORKER_ENV)
    env.update({"DATABASE_URL": _database_url(), "REDIS_URL": redis_url,
                "SECRET_KEY": stack_secret_key(), "DEBUG": "0", "DATABASE_POOL": "true", **extra_env})
    port = _free_port()
    server = WebServer(f"http://127.0.0.1:{port}", port, env, tmp_path_factory.mktemp("web") / "daphne.log")
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def web(django_db_setup, e2e_redis_url, tmp_path_factory) -> Iterator[WebServer]:  # noqa: ANN001
    """The portal on the test database, for the whole session."""
    with running_web(e2e_redis_url, tmp_path_factory) as server:
        yield server


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    """Debian's Chromium driven by Playwright, for one test module (skip when either is missing).

    While Playwright's sync API is started it marks its asyncio event loop as
    running in this thread. Every ``async_to_sync`` in that thread then refuses
    to run, so Playwright is stopped at the end of each browser module rather
    than kept for the session: the Channels consumer tests and anything else
    that runs later in the session get a thread without a loop. For the same
    span only, Django's async-safety check is lifted: the tests' own ORM calls
    are ordinary blocking calls made between browser steps, which Django would
    refuse while a loop is marked running.
    """
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        unavailable("the playwright Python package is not installed")
    if not CHROMIUM.exists():
        unavailable(f"{CHROMIUM} is missing: install Debian's chromium package")
    with pytest.MonkeyPatch.context() as patch, sync_playwright() as playwright:
        patch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


class Screens:
    """Numbered screenshots of one test: ``artifacts/screenshots/<test>-<n>-<what>.png``."""

    def __init__(self, test_name: str) -> None:
        self.prefix = re.sub(r"[^A-Za-z0-9_.-]+", "_", test_name)
        self.count = 0
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        for old in SCREENSHOTS.glob(f"{self.prefix}-*.png"):
            old.unlink()

    def shot(self, page: Any, what: str) -> Path:
        self.count += 1
        path = SCREENSHOTS / f"{self.prefix}-{self.count:02d}-{what}.png"
        page.screenshot(path=str(path), full_page=True)
        return path


@pytest.fixture
def screens(request) -> Screens:  # noqa: ANN001
    return Screens(request.node.name)


@pytest.fixture
def user_factory(transactional_db) -> Callable[..., Any]:  # noqa: ANN001
    """``user_factory(name, staff=False)``: a committed user with the browser tests' password.

    The password is hashed with PBKDF2, which the web server's (production)
    settings accept; the test settings' fast hasher is unknown to them.
    """
    from django.contrib.auth.hashers import PBKDF2PasswordHasher
    from django.contrib.auth.models import User

    hasher = PBKDF2PasswordHasher()

    def make(name: str, staff: bool = False) -> Any:
        user = User.objects.create_user(name, f"{name}@example.org", None, is_staff=staff)
        user.password = hasher.encode(PASSWORD, hasher.salt(), iterations=1000)
        user.save(update_fields=["password"])
        return user

    return make


@pytest.fixture
def browser_page(chromium, web) -> Callable[..., Any]:  # noqa: ANN001
    """``browser_page(user, width=1280, height=900)``: a logged-in page in a fresh browser context.

    JavaScript errors on any page fail the test at teardown.
    """
    contexts = []
    errors: list[str] = []

    def make(user: Any, width: int = 1280, height: int = 900, **context_args: Any) -> Any:
        context = chromium.new_context(viewport={"width": width, "height": height}, base_url=web.url, **context_args)
        context.set_default_timeout(UI_WAIT_MS)
        contexts.append(context)
        page = context.new_page()
        page.on("pageerror", lambda exc: errors.append(f"{page.url}: {exc.stack or exc}"))
        page.goto("/accounts/login/")
        page.fill("input[name=username]", user.username)
        page.fill("input[name=password]", PASSWORD)
        page.click("main button[type=submit]")
        page.wait_for_url(re.compile(r".*/jobs/$"))
        return page

    yield make
    for context in contexts:
        context.close()
    assert errors == [], f"JavaScript errors: {errors}"


def wait_for_db(predicate: Callable[[], Any], what: str) -> Any:
    """Poll the database (the test process's own connection) until ``predicate`` holds."""
    from django.db import close_old_connections

    def fresh() -> Any:
        close_old_connections()
        return predicate()

    return wait_until(fresh, what)


def no_reload_marker(page: Any) -> None:
    """Mark the page's window; ``assert_not_reloaded`` fails if the page was loaded again since."""
    page.evaluate("window.__notReloaded = true")


def assert_not_reloaded(page: Any) -> None:
    assert page.evaluate("window.__notReloaded === true"), "the page was reloaded"
