"""The agent's state file (round trip, corrupt or unknown versions set aside) and its work-dir lock."""

from __future__ import annotations

import json

import pytest

from cluster.agent import statefile


def test_state_round_trip_and_unreadable_state_is_kept_aside(tmp_path):
    path = tmp_path / "agent-state.json"
    assert statefile.load(path) == {}
    statefile.save(path, {"node": "n", "attempts": []})
    assert statefile.load(path) == {"node": "n", "attempts": [], "version": statefile.STATE_VERSION}
    path.write_text("{truncated")
    assert statefile.load(path) == {}
    assert [p.name.startswith("agent-state.json.corrupt-") for p in tmp_path.iterdir()] == [True]


def test_unknown_state_version_is_ignored(tmp_path):
    path = tmp_path / "s.json"
    path.write_text(json.dumps({"version": 99, "attempts": [{"x": 1}]}))
    assert statefile.load(path) == {}


def test_workdir_lock_admits_one_agent(tmp_path):
    import os

    fd = statefile.lock_workdir(tmp_path)
    with pytest.raises(statefile.WorkdirBusy, match="another agent"):
        statefile.lock_workdir(tmp_path)
    os.close(fd)
    os.close(statefile.lock_workdir(tmp_path))
