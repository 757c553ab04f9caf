"""tests/support/procs.py: job process groups found by their agent's name and, when given, their run's marker."""

from __future__ import annotations

import os
import subprocess
import uuid

from tests.support.procs import RUN_MARKER, group_alive, job_groups, kill_job_groups


def _job(node: str, marker: str | None) -> subprocess.Popen:
    """A process leading its own group, with a job's environment (as an agent would start it)."""
    env = {**os.environ, "GPUSCHED_NODE": node}
    env.pop(RUN_MARKER, None)
    if marker is not None:
        env[RUN_MARKER] = marker
    return subprocess.Popen(["sleep", "60"], env=env, start_new_session=True)


def test_jobs_are_found_by_agent_name_and_only_in_their_own_run() -> None:
    node = f"procs-{uuid.uuid4().hex[:8]}"
    mine, other, unmarked = _job(node, "run-1"), _job(node, "run-2"), _job(node, None)
    stranger = _job(f"{node}-x", "run-1")
    try:
        assert job_groups([node]) == sorted([mine.pid, other.pid, unmarked.pid])
        assert job_groups([node], "run-1") == [mine.pid]
        assert job_groups([f"{node}-x"], "run-1") == [stranger.pid]

        assert kill_job_groups([node], "run-1") == [mine.pid]
        mine.wait(timeout=10)
        assert not group_alive(mine.pid)
        assert group_alive(other.pid) and group_alive(unmarked.pid) and group_alive(stranger.pid)
    finally:
        for process in (mine, other, unmarked, stranger):
            process.kill()
            process.wait(timeout=10)
