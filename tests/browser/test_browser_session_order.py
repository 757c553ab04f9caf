"""The browser fixtures leave the test session as they found it.

A separate pytest session runs a module that drives Chromium through the
``chromium`` fixture, then modules in another directory that need a thread
without a running event loop (what Channels' ``WebsocketCommunicator`` and
``async_to_sync`` need) and Django's async-safety check switched on. Run in
that order, they pass only if the fixture stops Playwright and restores the
environment when its module ends.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.browser.conftest import CHROMIUM
from tests.conftest import unavailable

REPO = Path(__file__).resolve().parents[2]

BROWSER_MODULE = '''
def test_chromium_renders_a_page(chromium):
    page = chromium.new_page()
    page.set_content("<p id='greeting'>hello</p>")
    assert page.text_content("#greeting") == "hello"
    page.close()
'''

LATER_MODULE = '''
import asyncio
import os

import pytest
from asgiref.sync import async_to_sync


def test_no_event_loop_is_left_running_in_this_thread():
    with pytest.raises(RuntimeError):
        asyncio.get_running_loop()


def test_async_to_sync_runs_a_coroutine():
    async def answer():
        await asyncio.sleep(0)
        return 42

    assert async_to_sync(answer)() == 42


def test_django_async_safety_check_is_on_again():
    assert "DJANGO_ALLOW_ASYNC_UNSAFE" not in os.environ
'''


def test_tests_after_the_browser_modules_get_a_thread_without_an_event_loop(tmp_path):
    try:
        import playwright  # noqa: F401
    except ImportError:
        unavailable("the playwright Python package is not installed")
    if not CHROMIUM.exists():
        unavailable(f"{CHROMIUM} is missing: install Debian's chromium package")
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "conftest.py").write_text("from tests.browser.conftest import chromium  # noqa: F401\n")
    (tmp_path / "a_browser").mkdir()
    (tmp_path / "a_browser" / "test_browser_first.py").write_text(BROWSER_MODULE)
    (tmp_path / "b_later").mkdir()
    (tmp_path / "b_later" / "test_later.py").write_text(LATER_MODULE)
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_ALLOW_ASYNC_UNSAFE"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:randomly", "-p", "no:django", "-p", "no:cacheprovider",
         "-q", "-rA", "a_browser", "b_later"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "4 passed" in output, output
