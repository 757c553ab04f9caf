"""The ``--eta-sample``/``--eta-csv`` options of the command line."""

from __future__ import annotations

import csv
import json

import pytest

from scheduler.sim.cli import main

SMALL = ["--workload", "synthetic", "--jobs", "80", "--cluster", "4x4", "--no-progress"]


@pytest.mark.parametrize("argv, fragment", [
    (["--eta-sample", "0"], "--eta-sample must be >= 1"),
    (["--eta-sample", "x"], "invalid int value"),
    (["--eta-csv", "out.csv"], "--eta-csv applies only with --eta-sample"),
    (["--eta-sample", "5", "--eta-draws", "4"], "--eta-draws must be an odd number >= 1, got 4"),
    (["--eta-sample", "5", "--eta-draws", "0"], "--eta-draws must be an odd number >= 1, got 0"),
    (["--progress-reports", "0.5"], "--progress-reports applies only with --eta-sample"),
    (["--eta-sample", "5", "--progress-reports", "1.5"], "--progress-reports must be a share between 0 and 1, got 1.5"),
    (["--eta-sample", "5", "--progress-reports", "-0.1"], "--progress-reports must be a share between 0 and 1"),
    (["--eta-sample", "5", "--progress-reports", "nan"], "--progress-reports must be a share between 0 and 1, got nan"),
    (["--eta-sample", "5", "--progress-reports", "half"], "invalid float value: 'half'"),
    (["--eta-sample", "5", "--progress-noise", "0.2"], "--progress-noise applies only with --progress-reports"),
    (["--progress-noise", "0.2"], "--progress-noise applies only with --progress-reports"),
    (["--eta-sample", "5", "--progress-reports", "1", "--progress-noise", "-1"],
     "--progress-noise must be a number between 0 and 3, got -1.0"),
    (["--eta-sample", "5", "--progress-reports", "1", "--progress-noise", "inf"],
     "--progress-noise must be a number between 0 and 3, got inf"),
])
def test_bad_eta_options_exit_2_naming_the_option(capsys, argv, fragment):
    assert main(["--policy", "fitgpp", *SMALL, *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and fragment in err


def test_eta_sample_adds_the_eta_object_and_writes_the_csv(capsys, tmp_path):
    out_json, out_csv = tmp_path / "r.json", tmp_path / "eta.csv"
    status = main(["--policy", "fifo", "--policy", "fitgpp", *SMALL, "--eta-sample", "25", "--eta-seed", "2",
                   "--json", str(out_json), "--eta-csv", str(out_csv)])
    assert status == 0
    assert "start-time forecasts: 25 samples" in capsys.readouterr().out
    for run in json.loads(out_json.read_text()):
        eta = run["eta"]
        assert set(eta) == {"samples", "abs_error_seconds", "within_25pct", "within_25pct_waited", "progress_reports",
                            "progress_noise"}
        assert eta["progress_reports"] == 0.0 and eta["progress_noise"] == 0.0
        assert eta["samples"] == 25 and set(eta["abs_error_seconds"]) == {"p50", "p90"}
        assert 0.0 <= eta["within_25pct"] <= 1.0
    rows = list(csv.DictReader(out_csv.open()))
    assert len(rows) == 50 and {r["policy"] for r in rows} == {"fifo", "fitgpp"}
    assert {"job_id", "job_class", "submit_time", "forecast_start", "actual_start"} <= set(rows[0])


def test_without_eta_sample_there_is_no_eta_object(tmp_path, capsys):
    out_json = tmp_path / "r.json"
    assert main(["--policy", "fitgpp", *SMALL, "--json", str(out_json)]) == 0
    assert "eta" not in json.loads(out_json.read_text())[0]


def test_progress_reports_are_stated_in_the_line_and_the_json(capsys, tmp_path):
    out_json = tmp_path / "r.json"
    assert main(["--policy", "fitgpp", *SMALL, "--eta-sample", "25", "--progress-reports", "0.5",
                 "--progress-noise", "0.25", "--json", str(out_json)]) == 0
    assert "(progress reports from 0.5 of the jobs, rates misread by sigma 0.25)" in capsys.readouterr().out
    eta = json.loads(out_json.read_text())[0]["eta"]
    assert eta["progress_reports"] == 0.5 and eta["progress_noise"] == 0.25
