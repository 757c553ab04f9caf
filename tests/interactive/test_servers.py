"""Each session kind's command."""

from __future__ import annotations

import pytest

from interactive.servers import server_command


def test_each_kind_has_its_command() -> None:
    assert server_command("jupyter").startswith('JUPYTER_TOKEN="$GPUSCHED_SESSION_SECRET" exec jupyter lab')
    assert server_command("terminal") == "exec python3 -m gpusched.terminal"


def test_an_unknown_kind_raises() -> None:
    with pytest.raises(ValueError):
        server_command("vnc")
