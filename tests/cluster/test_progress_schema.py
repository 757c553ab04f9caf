"""The progress report contract shared by the agent and the server."""

from __future__ import annotations

import pytest

from cluster.progress_schema import check_report, parse_line
from cluster.protocol import ProtocolError


def test_a_full_report_passes_unchanged() -> None:
    report = {"t": 1.5, "step": 4, "total_steps": 8, "epoch": 1, "metrics": {"loss": 0.25},
              "checkpoint": {"step": 4, "path": "a/b"}}
    assert check_report(report) == {**report, "epoch": 1.0}


@pytest.mark.parametrize("line, field", [
    (b'{"step": NaN}', "line"), (b'{"metrics": {"loss": -Infinity}}', "line"), (b"x" * 5000, "line"),
    (b'{"total_steps": 0}', "total_steps"), (b'{"epoch": "1"}', "epoch"), (b'{"who": 1}', "who"),
    (b'{"metrics": {"a": 1e999}}', "metrics[a]"), (b'{"metrics": {"loss\\n": 1}}', "metrics"), (b'{"metrics": {"a": ' + b"9" * 400 + b"}}", "metrics[a]"),
    (b'{"checkpoint": {"step": 1, "rm": "-rf"}}', "checkpoint"), (b"7", "report"),
])
def test_bad_lines_name_the_field(line, field) -> None:
    with pytest.raises(ProtocolError) as caught:
        parse_line(line)
    assert caught.value.field == field
