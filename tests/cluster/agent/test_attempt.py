"""The attempt record: saved and restored through the state file, and the checkpoint marker's identity."""

from __future__ import annotations

import json
import os

from cluster import protocol
from cluster.agent.attempt import TrackedAttempt, marker_identity, read_exit_file


def test_an_attempt_round_trips_through_json_and_ignores_unknown_keys(tmp_path):
    att = TrackedAttempt(job_id="j", attempt=2, pgid=7, start_ticks=9, started_at=1.5, grace_period=3.0, time_limit=None,
                  job_dir=str(tmp_path), checkpoint_dir=str(tmp_path / "c"), gpu_indices=[1], notice_at=2.0)
    data = json.loads(json.dumps(att.to_state()))
    assert "handle" not in data
    assert TrackedAttempt.from_state({**data, "from_a_newer_agent": 1}) == att
    assert att.key == ("j", 2)
    assert (att.log_path.name, att.exit_path.name) == ("attempt-2.log", "attempt-2.exit")


def test_the_marker_identity_changes_when_the_marker_is_replaced(tmp_path):
    assert marker_identity(tmp_path) is None
    marker = tmp_path / protocol.CHECKPOINT_MARKER
    marker.write_text("1")
    before = marker_identity(tmp_path)
    tmp = tmp_path / "new"
    tmp.write_text("2")
    os.replace(tmp, marker)
    assert marker_identity(tmp_path) not in (None, before)


def test_an_exit_file_that_is_not_a_json_object_reads_as_none(tmp_path):
    path = tmp_path / "attempt-1.exit"
    assert read_exit_file(path) is None
    path.write_text("[1]")
    assert read_exit_file(path) is None
    path.write_text('{"done": true}')
    assert read_exit_file(path) == {"done": True}
