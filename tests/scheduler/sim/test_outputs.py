"""Output files of the simulator: a path that cannot be written is refused before the run, by option."""

from __future__ import annotations

import json

import pytest

from scheduler.sim.cli import main
from scheduler.sim.outputs import check_output_paths

SMALL = ["--policy", "fifo", "--workload", "synthetic", "--jobs", "40", "--cluster", "2x4", "--no-progress"]


def test_a_missing_folder_and_a_folder_named_as_the_file_are_named_with_their_option(tmp_path):
    check_output_paths({"--json": str(tmp_path / "r.json"), "--report": None})  # writable: no error
    with pytest.raises(ValueError, match=r"^--jobs-csv: no folder .*/missing to write x\.csv in$"):
        check_output_paths({"--jobs-csv": str(tmp_path / "missing" / "x.csv")})
    with pytest.raises(ValueError, match=r"^--json: .* is a folder, not a file$"):
        check_output_paths({"--json": str(tmp_path)})


def test_the_cli_refuses_an_unwritable_output_before_running_and_writes_a_good_one(tmp_path, capsys):
    assert main([*SMALL, "--jobs-csv", str(tmp_path / "nowhere" / "jobs.csv")]) == 2
    out, err = capsys.readouterr()
    assert out == ""  # nothing was simulated
    assert err.strip() == (f"python -m scheduler.sim: error: --jobs-csv: no folder {tmp_path / 'nowhere'} "
                           f"to write jobs.csv in")
    assert main([*SMALL, "--json", str(tmp_path / "r.json"), "--jobs-csv", str(tmp_path / "jobs.csv")]) == 0
    assert json.loads((tmp_path / "r.json").read_text())[0]["policy"] == "fifo"
    assert (tmp_path / "jobs.csv").read_text().startswith("policy,job_id,")


def test_a_file_that_still_cannot_be_written_after_the_run_is_one_error_line_not_a_traceback(
        tmp_path, capsys, monkeypatch):
    target = tmp_path / "r.json"
    target.mkdir()  # as if made a folder while the run went on: the check before the run is skipped
    monkeypatch.setattr("scheduler.sim.cli.check_output_paths", lambda paths: None)
    assert main([*SMALL, "--json", str(target)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("python -m scheduler.sim: error: results not written: [Errno 21]")
