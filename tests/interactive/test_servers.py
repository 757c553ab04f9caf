"""Each session kind's command."""

from __future__ import annotations

import pytest

from interactive.servers import server_command


def test_each_kind_has_its_command() -> None:
    assert '; JUPYTER_TOKEN="$GPUSCHED_SESSION_SECRET" exec jupyter lab --no-browser' in server_command("jupyter")
    assert server_command("terminal") == "exec python3 -m gpusched.terminal"


def test_an_unknown_kind_raises() -> None:
    with pytest.raises(ValueError):
        server_command("vnc")


def test_the_lab_starts_with_the_news_announcements_plugin_disabled_on_a_config_path_of_its_own(tmp_path) -> None:  # noqa: ANN001
    """The command run by a shell, with a ``jupyter`` on PATH that reports its config path and page config."""
    import json

    out = _run_lab_command(tmp_path, tmp_path)
    config_path, page_config = out.split("\n", 1)
    own, site = config_path.split(":")
    assert own.startswith(str(tmp_path)) and site == "/site/conf"  # the session's own first, the site's kept
    assert json.loads(page_config) == {"disabledExtensions": {"@jupyterlab/apputils-extension:announcements": True}}


def test_the_lab_still_starts_where_no_temporary_directory_can_be_made(tmp_path) -> None:  # noqa: ANN001
    out = _run_lab_command(tmp_path, tmp_path / "missing")
    assert out.split("\n", 1)[0] == "/site/conf"


def _run_lab_command(tmp_path, tmpdir) -> str:  # noqa: ANN001
    """The jupyter kind's command run by ``sh`` with a stand-in ``jupyter`` that prints what it was given."""
    import os
    import subprocess

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    stand_in = bin_dir / "jupyter"
    stand_in.write_text('#!/bin/sh\necho "$JUPYTER_CONFIG_PATH"\ncat "${JUPYTER_CONFIG_PATH%%:*}/labconfig/page_config.json"\n')
    stand_in.chmod(0o755)
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "TMPDIR": str(tmpdir), "JUPYTER_CONFIG_PATH": "/site/conf",
           "GPUSCHED_SESSION_SECRET": "s", "GPUSCHED_SESSION_HOST": "127.0.0.1", "GPUSCHED_SESSION_PORT": "1",
           "GPUSCHED_SESSION_BASE_URL": "/sessions/1/"}
    return subprocess.run(["sh", "-c", server_command("jupyter")], env=env, capture_output=True, text=True).stdout
