"""manage.py names a settings error instead of Django's "Models aren't loaded yet"."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def manage(*args: str, **env: str) -> subprocess.CompletedProcess:
    keep = {k: v for k, v in os.environ.items() if k in {"PATH", "HOME", "LANG"}}
    return subprocess.run([sys.executable, "manage.py", *args], env={**keep, **env}, cwd=ROOT, capture_output=True,
                          text=True, timeout=120)


@pytest.mark.parametrize("env, variable", [({}, "SECRET_KEY"), ({"SECRET_KEY": "k", "LOG_LEVEL": "LOUD"}, "LOG_LEVEL")])
def test_a_settings_error_is_one_line_naming_the_variable(env, variable) -> None:
    result = manage("makemigrations", "--check", "--dry-run", **env)
    assert result.returncode == 1
    assert result.stderr.strip().startswith("manage.py: the settings cannot be loaded:") and variable in result.stderr
    assert "Traceback" not in result.stderr and "Models aren't loaded" not in result.stderr


def test_with_good_settings_commands_run() -> None:
    result = manage("check", "--deploy", "--fail-level", "CRITICAL", SECRET_KEY="k" * 60, DEBUG="false")
    assert result.returncode == 0, result.stderr
