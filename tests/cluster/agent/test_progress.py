"""The agent's progress reader: valid reports forwarded (coalesced, rate-limited), hostile ones dropped.

Units drive ``ProgressReader`` on real files with a fake clock; the last tests run a real agent
whose job writes through ``gpusched.job`` and then floods and corrupts its progress file.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from cluster import protocol
from cluster.agent.attempt import TrackedAttempt
from cluster.agent.progress import MAX_READ_BYTES, ProgressReader, progress_path
from tests.cluster.agent.agent_testlib import PY, REPO


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def setup(tmp_path: Path):
    att = TrackedAttempt(job_id=7, attempt=2, pgid=1, start_ticks=None, started_at=0.0, grace_period=1.0, time_limit=None,
                  job_dir=str(tmp_path), checkpoint_dir=str(tmp_path / "ck"))
    (tmp_path / "work").mkdir()
    sent: list[tuple[str, dict[str, Any]]] = []
    clock = Clock()
    reader = ProgressReader(lambda task, kwargs: sent.append((task, kwargs)), clock)
    return att, reader, sent, clock, progress_path(tmp_path, 2)


def write(path: Path, *lines: bytes | str | dict) -> None:
    with open(path, "ab") as f:
        for line in lines:
            data = json.dumps(line).encode() if isinstance(line, dict) else line.encode() if isinstance(line, str) else line
            f.write(data + b"\n")


def test_valid_lines_of_one_poll_become_one_report_with_the_newest_values(setup) -> None:
    att, reader, sent, clock, path = setup
    write(path, {"step": 1, "total_steps": 10, "metrics": {"loss": 2.0, "acc": 0.1}, "t": 5.0},
          {"step": 2, "metrics": {"loss": 1.5}, "t": 6.0}, {"checkpoint": {"step": 2, "path": "ck/2"}})
    assert reader.poll(att)
    assert sent == [(protocol.REPORT_PROGRESS, {"job_id": 7, "attempt": 2, "step": 2, "total_steps": 10, "t": 6.0,
                                                "metrics": {"loss": 1.5, "acc": 0.1},
                                                "checkpoint": {"step": 2, "path": "ck/2"}})]


def test_at_most_one_report_per_interval_and_the_file_is_the_buffer(setup) -> None:
    att, reader, sent, clock, path = setup
    write(path, {"step": 1})
    reader.poll(att)
    write(path, {"step": 2})
    clock.now += 0.5
    assert not reader.poll(att) and len(sent) == 1  # not due: nothing read
    write(path, {"step": 3})
    clock.now += 0.6
    reader.poll(att)
    assert [kw["step"] for _, kw in sent] == [1, 3]
    write(path, {"step": 4})
    reader.poll(att, final=True)  # an attempt's end forwards what is left at once
    assert [kw["step"] for _, kw in sent] == [1, 3, 4]


def test_a_line_still_being_written_waits_for_its_newline(setup) -> None:
    att, reader, sent, clock, path = setup
    path.write_bytes(b'{"step": 5}\n{"step": 6')
    reader.poll(att)
    assert sent[-1][1]["step"] == 5
    with open(path, "ab") as f:
        f.write(b"}\n")
    clock.now += 2
    reader.poll(att)
    assert sent[-1][1]["step"] == 6


@pytest.mark.parametrize("bad", [
    b"not json", b'{"step": NaN}', b'{"metrics": {"loss": Infinity}}', b'{"step": -1}', b'{"step": 1.5}',
    b'{"step": true}', b'{"metrics": {"bad name!": 1}}', b'{"metrics": {"loss": "low"}}', b"[1, 2]",
    b'{"steps": 3}', b'{"metrics": {"x": 1' + b"0" * 400 + b"}}", b"{" * 100_000 + b"}" * 100_000,
    b'{"checkpoint": {"path": 7}}', b"\xff\xfe garbage",
])
def test_malformed_or_hostile_lines_are_dropped_and_the_good_ones_still_arrive(setup, bad, caplog) -> None:
    att, reader, sent, clock, path = setup
    write(path, {"step": 1}, bad, {"step": 2, "metrics": {"loss": 0.5}})
    reader.poll(att)
    assert sent == [(protocol.REPORT_PROGRESS, {"job_id": 7, "attempt": 2, "step": 2, "metrics": {"loss": 0.5}})]
    assert "report(s) dropped" in caplog.text


def test_a_huge_line_without_newline_is_dropped_not_waited_for(setup) -> None:
    att, reader, sent, clock, path = setup
    path.write_bytes(b'{"step": 1}\n' + b"x" * 10_000)
    reader.poll(att)
    assert sent[-1][1]["step"] == 1
    write(path, {"step": 2})
    clock.now += 2
    reader.poll(att)
    assert sent[-1][1]["step"] == 2


def test_a_flood_costs_one_bounded_read_and_the_newest_report_wins(setup) -> None:
    att, reader, sent, clock, path = setup
    line = json.dumps({"step": 0, "metrics": {"loss": 1.0}}).encode() + b"\n"
    path.write_bytes(line * (20 * MAX_READ_BYTES // len(line)))
    write(path, {"step": 999_999})
    reader.poll(att)
    assert sent[-1][1]["step"] == 999_999
    assert att.progress_offset == path.stat().st_size


def test_only_sixteen_metric_names_per_attempt(setup) -> None:
    att, reader, sent, clock, path = setup
    write(path, {"metrics": {f"m{i}": i for i in range(16)}})
    reader.poll(att)
    clock.now += 2
    write(path, {"metrics": {"m0": 5, "m16": 1}})
    reader.poll(att)
    assert sent[-1][1]["metrics"] == {"m0": 5.0}


def test_a_symlink_or_a_fifo_is_not_followed_or_read(setup, tmp_path) -> None:
    att, reader, sent, clock, path = setup
    secret = tmp_path / "secret"
    secret.write_text('{"step": 42}\n')
    path.symlink_to(secret)
    assert not reader.poll(att) and sent == []
    path.unlink()
    os.mkfifo(path)
    clock.now += 2
    assert not reader.poll(att) and sent == []  # returns at once: a FIFO is never opened for a blocking read


def test_the_offset_survives_a_new_reader_as_after_an_agent_restart(setup) -> None:
    att, reader, sent, clock, path = setup
    write(path, {"step": 1})
    reader.poll(att)
    saved = TrackedAttempt.from_state(att.to_state())
    again: list = []
    ProgressReader(lambda task, kwargs: again.append(kwargs), clock).poll(saved)
    assert again == []  # nothing repeated
    write(path, {"step": 2})
    ProgressReader(lambda task, kwargs: again.append(kwargs), clock).poll(saved)
    assert [kw["step"] for kw in again] == [2]


# ----- a real agent ---------------------------------------------------------------------------------------

HOSTILE_JOB = f"""
import os, sys
sys.path.insert(0, {str(REPO)!r})
from gpusched import job
path = os.environ["GPUSCHED_PROGRESS_FILE"]
job.progress(step=1, total_steps=4, metrics={{"loss": 1.0}})
with open(path, "ab") as f:
    f.write(b"x" * 5_000_000)                        # a huge line
    f.write(b"\\n{{not json\\n" + b'{{"step": NaN}}\\n')  # malformed, NaN
    for i in range(50_000):                           # a flood
        f.write(b'{{"step": 2, "metrics": {{"loss": 0.5}}}}\\n')
job.progress(step=3, total_steps=4, metrics={{"loss": 0.25}})
print("wrote", flush=True)
"""


def test_a_real_job_reports_through_the_helper_and_its_hostile_writes_do_not_stop_the_agent(node, tmp_path) -> None:
    script = tmp_path / "hostile.py"
    script.write_text(HOSTILE_JOB)
    node.launch("prog-1", 1, f"{PY} {script}; sleep 1", gpu_indices=[0])
    exited = node.reports.wait(protocol.REPORT_EXITED, job_id="prog-1", attempt=1)
    assert exited["exit_code"] == 0
    reports = node.reports.all(protocol.REPORT_PROGRESS, job_id="prog-1", attempt=1)
    assert reports and reports[-1]["step"] == 3 and reports[-1]["metrics"] == {"loss": 0.25}
    assert reports[-1]["signed"] and "token" not in reports[-1]
    assert all(r["step"] in (1, 2, 3) for r in reports)
    # The agent is still alive and serving: another job runs and reports.
    node.launch("prog-2", 1, f"{PY} -c \"import sys; sys.path.insert(0, {str(REPO)!r}); from gpusched import job; "
                f"job.progress(step=9)\"", gpu_indices=[1])
    node.reports.wait(protocol.REPORT_EXITED, job_id="prog-2", attempt=1)
    assert node.reports.all(protocol.REPORT_PROGRESS, job_id="prog-2")[-1]["step"] == 9
    assert "dropped" in node.agent_output()
