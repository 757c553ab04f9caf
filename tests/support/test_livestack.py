"""The live-stack plugin (tests/support/livestack.py): one definition of its fixtures, one worker at a time."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.support import livestack

REPO = Path(__file__).resolve().parents[2]


def test_the_e2e_and_browser_tests_see_one_definition_of_each_live_stack_fixture():
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "--fixtures", "-p", "no:randomly", "-p", "no:cacheprovider",
         "tests/e2e", "tests/browser"],
        cwd=REPO, env={**os.environ, "CI": ""}, capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    for name in ("e2e_redis_url", "e2e_worker_slot", "e2e_worker", "live"):
        places = re.findall(rf"^{name}(?: \[[a-z]+ scope\])? -- (\S+):\d+$", result.stdout, re.MULTILINE)
        assert places == ["tests/support/livestack.py"], f"{name} is defined at {places}"


@dataclass
class FakeSlot:
    stops: list[str] = field(default_factory=list)

    def stop(self) -> None:
        self.stops.append("stop")


def _item(config: SimpleNamespace, *fixtures: str) -> SimpleNamespace:
    return SimpleNamespace(config=config, fixturenames=list(fixtures))


def _teardown(item: SimpleNamespace, nextitem: SimpleNamespace | None) -> None:
    hook = livestack.pytest_runtest_teardown(item, nextitem)
    next(hook)  # the test's own teardown runs here
    with pytest.raises(StopIteration):
        hook.send(None)


def test_the_worker_is_kept_for_a_next_test_that_asks_for_it_and_stopped_otherwise():
    slot = FakeSlot()
    config = SimpleNamespace(stash={livestack._WORKER_SLOT: slot})
    e2e = _item(config, "live", "e2e_worker", "e2e_worker_slot", "transactional_db")
    browser_live = _item(config, "browser_page", "live", "e2e_worker", "e2e_worker_slot")
    other = _item(config, "db", "redis_url")

    _teardown(e2e, browser_live)
    assert slot.stops == []
    _teardown(browser_live, other)
    assert slot.stops == ["stop"]
    _teardown(other, e2e)
    assert slot.stops == ["stop"]
    _teardown(e2e, None)  # the last test of the session
    assert slot.stops == ["stop", "stop"]


def test_without_a_slot_nothing_is_stopped():
    config = SimpleNamespace(stash={})
    _teardown(_item(config, "db"), None)


def test_the_plugin_runs_the_processes_from_the_repository_root():
    assert livestack.REPO == REPO
    assert livestack.TRAIN.is_file()


@pytest.mark.django_db(transaction=True)
def test_the_flush_after_a_live_test_is_run_again_when_it_loses_a_deadlock(monkeypatch) -> None:  # noqa: ANN001
    from django.core.management import call_command
    from django.core.management.base import CommandError
    from django.db import OperationalError, connection

    real = connection.ops.execute_sql_flush
    failures = iter([OperationalError("deadlock detected"), OperationalError("deadlock detected")])

    def flaky(sql_list: list[str]) -> None:
        failure = next(failures, None)
        if failure is not None:
            raise failure
        real(sql_list)

    monkeypatch.setattr(connection.ops, "execute_sql_flush", flaky)
    call_command("flush", interactive=False, verbosity=0)  # two deadlocks, then flushed
    assert next(failures, None) is None

    monkeypatch.setattr(connection.ops, "execute_sql_flush", lambda sql_list: (_ for _ in ()).throw(
        OperationalError("relation does not exist")))
    with pytest.raises(CommandError):  # any other failure fails at once
        call_command("flush", interactive=False, verbosity=0)
