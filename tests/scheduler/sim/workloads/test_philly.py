"""Philly adapter: documented class rule, seeded grace periods, windows, bad rows."""

from __future__ import annotations

import pytest

from scheduler.core.model import JobClass
from scheduler.sim.workloads.canonical import TraceError
from scheduler.sim.workloads.philly import PhillyRule, load_philly

from tests.support.traces import require_trace

SAMPLE = """timestamp,duration,num_gpus,gpu_time,cluster
2017-10-01 00:10:00,600.0,1,600.0,a
2017-10-01 00:00:00,3600.0,8,28800.0,b
2017-10-02 00:00:00,100.0,2,200.0,a
2017-10-03 00:00:00,100.0,4,400.0,a
2017-10-01 00:00:00,901.0,1,901.0,c
"""


@pytest.fixture
def sample(tmp_path):
    path = tmp_path / "philly.csv"
    path.write_text(SAMPLE)
    return path


def test_rule_classifies_small_short_jobs_as_te(sample):
    w = load_philly(sample)
    by_id = {j.spec.id: j for j in w.jobs}
    # Ids are the CSV line numbers; submit times count from the first submission.
    assert [j.spec.id for j in w.jobs] == ["philly-3", "philly-6", "philly-2", "philly-4", "philly-5"]
    assert by_id["philly-2"].spec.submit_time == 600.0
    assert by_id["philly-4"].spec.submit_time == 86400.0
    classes = {jid: j.spec.job_class for jid, j in by_id.items()}
    assert classes == {
        "philly-2": JobClass.TE,  # 1 GPU, 600 s
        "philly-3": JobClass.BE,  # 8 GPUs
        "philly-4": JobClass.TE,  # 2 GPUs, 100 s
        "philly-5": JobClass.BE,  # 4 GPUs
        "philly-6": JobClass.BE,  # 901 s > 900 s
    }
    assert w.te_share == pytest.approx(0.4)
    assert "TE share 40.0 %" in w.name
    assert "<= 2 GPUs and duration <= 900 s" in w.notes[0]


def test_rule_thresholds_are_parameters(sample):
    w = load_philly(sample, PhillyRule(te_max_gpus=1, te_max_duration=1000))
    te = {j.spec.id for j in w.jobs if j.spec.job_class is JobClass.TE}
    assert te == {"philly-2", "philly-6"}


def test_grace_is_seeded_per_job_and_kept_in_a_window(sample):
    rule = PhillyRule(seed=7)
    whole = {j.spec.id: j.spec.grace_period for j in load_philly(sample, rule).jobs}
    again = {j.spec.id: j.spec.grace_period for j in load_philly(sample, rule).jobs}
    assert whole == again
    assert set(whole.values()) <= set(rule.grace_choices)
    window = load_philly(sample, rule, window=(3600.0, 2 * 86400.0))
    assert [(j.spec.id, j.spec.submit_time) for j in window.jobs] == [("philly-4", 86400.0 - 3600.0)]
    assert window.jobs[0].spec.grace_period == whole["philly-4"]


def test_other_seed_changes_some_grace_periods(sample):
    a = [j.spec.grace_period for j in load_philly(sample, PhillyRule(seed=0)).jobs]
    b = [j.spec.grace_period for j in load_philly(sample, PhillyRule(seed=1)).jobs]
    assert a != b


@pytest.mark.parametrize(
    "row, column",
    [
        ("2017-13-01 00:00:00,10,1,10,a", "timestamp"),
        ("2017-10-01 00:00:00,abc,1,10,a", "duration"),
        ("2017-10-01 00:00:00,0,1,10,a", "duration"),
        ("2017-10-01 00:00:00,10,one,10,a", "num_gpus"),
        ("2017-10-01 00:00:00,10,1.5,10,a", "num_gpus"),
    ],
)
def test_malformed_row_names_line_and_column(tmp_path, row, column):
    path = tmp_path / "p.csv"
    path.write_text(SAMPLE + row + "\n")
    with pytest.raises(TraceError) as e:
        load_philly(path)
    assert (e.value.line, e.value.column) == (7, column)


def test_missing_column(tmp_path):
    path = tmp_path / "p.csv"
    path.write_text("timestamp,num_gpus\n2017-10-01 00:00:00,1\n")
    with pytest.raises(TraceError) as e:
        load_philly(path)
    assert e.value.column == "duration"


@pytest.mark.trace
def test_whole_philly_trace_loads():
    path = require_trace("philly/philly.csv")
    w = load_philly(path)
    assert len(w.jobs) == 82247
    assert w.max_gpus == 128
    assert 0.4 < w.te_share < 0.5
    span_days = w.jobs[-1].spec.submit_time / 86400.0
    assert 108 < span_days < 110
