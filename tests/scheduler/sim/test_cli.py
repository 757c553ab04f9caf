"""The command-line contract: exit status 2 on nonsense, the JSON schema, the report."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from scheduler.sim.cli import main, parse_window

from tests.support.traces import REPO, require_trace

SMALL = ["--workload", "synthetic", "--jobs", "80", "--cluster", "4x4", "--no-progress"]
HEADER = "job_id,submit_time,duration,num_gpus,job_class\n"


def run_cli(capsys, *argv):
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def one_line_error(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("python -m scheduler.sim: error: ")
    return lines[0]


@pytest.fixture
def trace(tmp_path):
    def write(body: str):
        path = tmp_path / "trace.csv"
        path.write_text(HEADER + body)
        return str(path)

    return write


@pytest.mark.parametrize(
    "argv, fragment",
    [
        (["--policy", "fifo", *SMALL, "--load", "-0.5"], "load must be > 0"),
        (["--policy", "fifo", *SMALL, "--te-share", "1.5"], "te_share must be in [0, 1]"),
        (["--policy", "nonesuch", *SMALL], "unknown policy 'nonesuch'"),
        (["--policy", "fifo", *SMALL[:-3], "--cluster", "16by8"], "NODESxGPUS"),
        (["--policy", "fifo", *SMALL[:-3], "--cluster", "0x8"], "at least 1 node"),
        (["--policy", "fifo", *SMALL[:-3], "--cluster", "99999999999x8"], "at most 100,000 nodes"),
        (["--policy", "fifo", *SMALL[:-3], "--cluster", "4x99999999"], "at most 1,024 GPUs"),
        (["--policy", "fifo", *SMALL[:-3], "--cluster", "\u0663x8"], "NODESxGPUS"),
        (["--policy", "fifo:no_such_param=1", *SMALL], "no_such_param"),
        (["--policy", "fifo:oops", *SMALL], "KEY=VALUE"),
        (["--policy", "fifo", "--param", "fitgpp.x=1", *SMALL], "names no --policy"),
        (["--workload", "synthetic"], "--policy"),
        (["--policy", "fifo"], "--workload"),
        (["--policy", "fifo", *SMALL, "--window", "1d:2d"], "--window applies only to --trace"),
        (["--policy", "fifo", *SMALL, "--seed", "x"], "invalid int value"),
    ],
)
def test_nonsense_arguments_exit_2_with_one_line(capsys, argv, fragment):
    status, out, err = run_cli(capsys, *argv)
    assert status == 2
    assert fragment in one_line_error(err)
    assert out == ""


def test_cluster_smaller_than_the_largest_job_exits_2(capsys, trace):
    path = trace("a,0,10,16,BE\nb,0,10,1,TE\n")
    status, _, err = run_cli(capsys, "--policy", "fifo", "--trace", path, "--cluster", "1x8", "--no-progress")
    assert status == 2
    assert "smaller than the largest job of the workload (16 GPUs)" in one_line_error(err)


def test_malformed_trace_exits_2_naming_file_and_line(capsys, trace):
    path = trace("a,0,10,1,BE\nb,0,-3,1,BE\n")
    status, _, err = run_cli(capsys, "--policy", "fifo", "--trace", path, "--no-progress")
    assert status == 2
    assert f"{path}:3: column 'duration'" in one_line_error(err)


def test_load_option_with_a_trace_exits_2(capsys, trace):
    path = trace("a,0,10,1,BE\n")
    status, _, err = run_cli(capsys, "--policy", "fifo", "--trace", path, "--load", "0.5")
    assert status == 2
    assert "--load applies only to --workload synthetic" in one_line_error(err)


def test_zero_gpu_job_exits_2(capsys, trace):
    path = trace("a,0,10,0,BE\n")
    status, _, err = run_cli(capsys, "--policy", "fifo", "--trace", path, "--no-progress")
    assert status == 2
    assert "asks for 0 GPUs" in one_line_error(err)


CLASS_KEYS = {"count", "slowdown", "wait_seconds", "jct_seconds"}
TOP_KEYS = {"policy", "workload", "jobs", "wall_seconds", "classes", "preemptions", "lost_gpu_seconds",
            "gpu_utilization", "makespan_seconds", "tenants", "fair_share"}


def test_json_schema_and_side_by_side_table(capsys, tmp_path):
    out_json = tmp_path / "r.json"
    status, out, _ = run_cli(
        capsys, "--policy", "fifo", "--policy", "fitgpp", "--policy", "fitgpp:max_preemptions=1",
        *SMALL, "--seed", "3", "--json", str(out_json),
    )
    assert status == 0
    data = json.loads(out_json.read_text())
    assert [d["policy"] for d in data] == ["fifo", "fitgpp", "fitgpp:max_preemptions=1"]
    for d in data:
        assert set(d) == TOP_KEYS
        assert d["jobs"] == 80
        assert d["workload"].startswith("synthetic seed=3 jobs=80 cluster=4x4")
        assert set(d["classes"]) == {"TE", "BE", "all"}
        for klass in d["classes"].values():
            assert set(klass) == CLASS_KEYS
            assert set(klass["slowdown"]) == {"p50", "p95", "p99", "mean"}
            assert set(klass["wait_seconds"]) == {"p50", "p95"}
            assert set(klass["jct_seconds"]) == {"mean", "p50", "p99"}
            assert klass["slowdown"]["p50"] >= 1.0
        assert d["classes"]["TE"]["count"] + d["classes"]["BE"]["count"] == d["classes"]["all"]["count"] == 80
        assert isinstance(d["preemptions"], int) and d["preemptions"] >= 0
        assert 0.0 < d["gpu_utilization"] <= 1.0
        assert d["makespan_seconds"] > 0 and d["wall_seconds"] > 0
    assert data[0]["preemptions"] == 0 and data[0]["lost_gpu_seconds"] == 0
    # One table, a row per run, then the change against fifo.
    assert "FIFO TE p95 slowdown:" in out
    for label in ("fifo ", "fitgpp ", "fitgpp:max_preemptions=1"):
        assert label in out
    assert "fitgpp vs fifo" in out


def test_same_seed_same_results(capsys, tmp_path):
    files = [tmp_path / "a.json", tmp_path / "b.json"]
    for f in files:
        assert main(["--policy", "preempt-random", *SMALL, "--seed", "5", "--json", str(f)]) == 0
    capsys.readouterr()
    a, b = (json.loads(f.read_text()) for f in files)
    for d in a + b:
        d.pop("wall_seconds")
    assert a == b


def test_param_option_applies_to_every_run_of_the_policy(capsys, tmp_path):
    out_json = tmp_path / "r.json"
    status, _, _ = run_cli(capsys, "--policy", "fitgpp", "--param", "fitgpp.max_preemptions=0", *SMALL,
                           "--json", str(out_json))
    assert status == 0
    [d] = json.loads(out_json.read_text())
    assert d["policy"] == "fitgpp:max_preemptions=0"
    assert d["preemptions"] == 0


def test_report_is_one_self_contained_html_file(capsys, tmp_path):
    report = tmp_path / "r.html"
    status, _, _ = run_cli(capsys, "--policy", "fifo", "--policy", "fitgpp", *SMALL, "--report", str(report))
    assert status == 0
    html = report.read_text()
    assert html.startswith("<!DOCTYPE html>")
    assert "Plotly.newPlot" in html
    assert len(html) > 1_000_000  # plotly.js itself is inlined
    # Nothing is loaded from elsewhere: no script or stylesheet with a source URL.
    assert re.findall(r"<script[^>]*\bsrc=", html) == []
    assert re.findall(r"<link[^>]*\bhref=", html) == []
    for title in ("TE slowdown CDF", "BE slowdown CDF", "Wait percentiles", "GPU utilization over time"):
        assert title in html


def test_module_entry_point_exits_2_on_a_bad_argument():
    done = subprocess.run(
        [sys.executable, "-m", "scheduler.sim", "--policy", "fifo", "--workload", "synthetic", "--load", "-1"],
        cwd=REPO, capture_output=True, text=True, check=False,
    )
    assert done.returncode == 2
    assert done.stderr.strip() == "python -m scheduler.sim: error: synthetic workload: load must be > 0, got -1.0"


@pytest.mark.parametrize("text, expected", [("14d:28d", (14 * 86400.0, 28 * 86400.0)), ("90m:3h", (5400.0, 10800.0)),
                                            ("0:3600", (0.0, 3600.0))])
def test_window_parsing(text, expected):
    assert parse_window(text) == expected


@pytest.mark.trace
def test_philly_window_run_prints_the_rule_and_te_share(capsys, tmp_path):
    path = require_trace("philly/philly.csv")
    out_json = tmp_path / "p.json"
    status, out, _ = run_cli(capsys, "--policy", "fifo", "--trace", str(path), "--trace-format", "philly",
                             "--window", "30d:31d", "--cluster", "32x8", "--no-progress", "--json", str(out_json))
    assert status == 0
    assert "Philly class rule: TE = jobs with <= 2 GPUs and duration <= 900 s" in out
    assert "TE share" in out
    [d] = json.loads(out_json.read_text())
    assert "Philly class rule" in d["workload"] and "TE share" in d["workload"]
