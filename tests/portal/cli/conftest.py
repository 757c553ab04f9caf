"""Fixtures for the command-line client's tests.

``fake_api``: a stand-in portal over real HTTP (see fake_portal.py).
``run_cli``: runs ``main()`` with an explicit environment and captured streams
and returns ``(exit_code, stdout, stderr)``.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from portal.cli.main import main
from tests.portal.cli.fake_portal import TOKEN, FakeApi, serve_fake_api


@pytest.fixture
def fake_api() -> Iterator[FakeApi]:
    with serve_fake_api() as api:
        yield api


CliRunner = Callable[..., tuple[int, str, str]]


@pytest.fixture
def run_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> CliRunner:
    """``run_cli(*argv, env={...})``: ``HOME`` points at an empty temp dir so a
    developer's own config file never leaks into a test.
    """

    def run(*argv: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
        out = io.StringIO()
        environ = {"HOME": str(tmp_path / "home")}
        environ.update(env or {})
        code = main(list(argv), stdout=out, env=environ)
        captured = capsys.readouterr()  # argparse and error lines go to sys.stderr
        return code, out.getvalue() + captured.out, captured.err

    return run


@pytest.fixture
def api_env(fake_api: FakeApi) -> dict[str, str]:
    return {"GPUSCHED_URL": fake_api.url, "GPUSCHED_TOKEN": TOKEN}
