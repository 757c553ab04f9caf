"""Canonical trace loader: valid files load, malformed rows are named by line and column."""

from __future__ import annotations

import io
import pickle

import pytest

from scheduler.core.model import JobClass
from scheduler.sim.workloads.canonical import TraceError, load_canonical, parse_canonical

HEADER = "job_id,submit_time,duration,num_gpus,job_class"


def parse(text: str):
    return parse_canonical(io.StringIO(text), source="t.csv")


def test_loads_rows_in_arrival_order_with_optional_columns_and_extra_ones_ignored():
    w = parse(
        "job_id,submit_time,duration,num_gpus,job_class,grace_period,num_cpus,mem_gb,user,tenant,priority,extra\n"
        "b,20,100,2,BE,30,8,64,ann,vision,3,zzz\n"
        "a,10,5.5,1,TE,,,,,,,\n"
        "c,10,7,0,BE,,,,,,,\n"
    )
    assert [j.spec.id for j in w.jobs] == ["a", "c", "b"]
    a, c, b = w.jobs
    assert (a.spec.job_class, a.spec.num_gpus, a.spec.submit_time, a.duration) == (JobClass.TE, 1, 10.0, 5.5)
    assert (a.spec.grace_period, a.spec.num_cpus, a.spec.mem_gb, a.spec.priority, a.spec.user) == (0.0, 0.0, 0.0, 0, "")
    assert (b.spec.grace_period, b.spec.num_cpus, b.spec.mem_gb) == (30.0, 8.0, 64.0)
    assert (b.spec.user, b.spec.tenant, b.spec.priority) == ("ann", "vision", 3)
    assert c.spec.num_gpus == 0


def test_blank_lines_are_not_jobs_and_do_not_shift_line_numbers():
    with pytest.raises(TraceError) as e:
        parse(f"{HEADER}\na,0,1,1,BE\n\nb,0,x,1,BE\n")
    assert e.value.line == 4


@pytest.mark.parametrize(
    "row, column, fragment",
    [
        ("b,0,abc,1,BE", "duration", "bad number 'abc'"),
        ("b,0,-5,1,BE", "duration", "must be >= 0"),
        ("b,0,0,1,BE", "duration", "must be > 0"),
        ("b,0,nan,1,BE", "duration", "not finite"),
        ("b,zero,5,1,BE", "submit_time", "bad number 'zero'"),
        ("b,-1,5,1,BE", "submit_time", "must be >= 0"),
        ("b,0,5,1.5,BE", "num_gpus", "bad integer '1.5'"),
        ("b,0,5,-1,BE", "num_gpus", "must be >= 0"),
        ("b,0,5,1,XX", "job_class", "unknown class 'XX'"),
        ("b,0,5,1,te", "job_class", "unknown class 'te'"),
        ("a,0,5,1,BE", "job_id", "duplicate id 'a'"),
        (",0,5,1,BE", "job_id", "empty id"),
        ("b,0,5", "num_gpus", "missing value"),
    ],
)
def test_malformed_row_is_rejected_with_line_and_column(row, column, fragment):
    with pytest.raises(TraceError) as e:
        parse(f"{HEADER}\na,0,1,1,BE\n{row}\n")
    err = e.value
    assert (err.source, err.line, err.column) == ("t.csv", 3, column)
    assert fragment in err.message
    assert str(err).startswith(f"t.csv:3: column '{column}': ")


@pytest.mark.parametrize("column", ["grace_period", "num_cpus", "mem_gb", "priority"])
def test_bad_optional_value_is_rejected(column):
    text = f"{HEADER},{column}\na,0,1,1,BE,oops\n"
    with pytest.raises(TraceError) as e:
        parse(text)
    assert (e.value.line, e.value.column) == (2, column)


def test_missing_required_column_is_named():
    with pytest.raises(TraceError) as e:
        parse("job_id,submit_time,num_gpus,job_class\na,0,1,BE\n")
    assert (e.value.line, e.value.column) == (1, "duration")
    assert "missing required column" in str(e.value)


def test_empty_file_is_rejected():
    with pytest.raises(TraceError, match="header row is required"):
        parse("")


def test_load_from_path_names_the_file(tmp_path):
    path = tmp_path / "trace.csv"
    path.write_text(f"{HEADER}\na,0,1,1,BE\nb,0,1,1,QQ\n")
    with pytest.raises(TraceError) as e:
        load_canonical(path)
    assert str(e.value).startswith(f"{path}:3: column 'job_class'")


def test_missing_file_is_a_trace_error(tmp_path):
    with pytest.raises(TraceError, match="cannot open"):
        load_canonical(tmp_path / "nope.csv")


def test_trace_error_survives_pickling():
    err = TraceError("f.csv", 7, "duration", "bad number 'x'")
    back = pickle.loads(pickle.dumps(err))
    assert (back.source, back.line, back.column, str(back)) == ("f.csv", 7, "duration", str(err))


def test_a_dependency_column_is_parsed_and_a_bad_one_named_with_its_line():
    w = parse(HEADER + ',dependency\na,0,10,1,BE,\nb,0,10,1,BE,"afterok:a,afterany:a"\n')
    b = next(j for j in w.jobs if j.spec.id == "b")
    assert [(c.kind.value, c.job_ids) for c in b.spec.dependencies] == [("afterok", ("a",)), ("afterany", ("a",))]
    with pytest.raises(TraceError, match=r"t.csv:3: column 'dependency': unknown dependency type 'after'"):
        parse(HEADER + ",dependency\na,0,10,1,BE,\nb,0,10,1,BE,after:a\n")
