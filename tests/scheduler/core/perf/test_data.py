"""Loaders: good files parse; every malformed row is rejected with file:line."""

from __future__ import annotations

from pathlib import Path

import pytest

from scheduler.core.perf.data import (
    DataError,
    load_placements,
    load_profile,
    parse_authors_params,
    parse_env_bandwidth,
    parse_placements,
    parse_profile,
)
from scheduler.core.perf.plans import Plan

CONFIG = """nodes,gpus,parameter_size,batch_size,seq_hid,num_cpu_threads,zero_type,is_tp,is_pp
1,8,320.7,1,12582912,1,0,0,0
1,4,320.7,1,12582912,4,1,0,0
"""
DATA = """forward_time,Tcc,Topt,iter_time,strategy
40,83,25,157,1100
63,158,148,376,1111
"""


def test_profile_parses() -> None:
    runs = parse_profile(CONFIG, DATA, "config.csv", "data.csv")
    assert [(r.gpus, r.threads, r.plan, r.iter_ms) for r in runs] == [
        (8, 1, Plan(), 157.0),
        (4, 4, Plan(memory="zero-offload"), 376.0),
    ]
    assert runs[1].source == "data.csv:3"


@pytest.mark.parametrize(
    ("config", "data", "where", "field"),
    [
        (CONFIG.replace("1,4,320.7", "1,4,abc"), DATA, "config.csv:3", "parameter_size"),
        (CONFIG.replace("1,8,320.7", "1,0,320.7"), DATA, "config.csv:2", "gpus"),
        (CONFIG.replace(",4,1,0,0", ",4,7,0,0"), DATA, "config.csv:3", "zero_type"),
        (CONFIG.replace("12582912,1,0,0,0", "12582912,1,0,2,0"), DATA, "config.csv:2", "is_tp"),
        (CONFIG, DATA.replace("63,158", "63,-158"), "data.csv:3", "Tcc"),
        (CONFIG, DATA.replace("157,1100", "157,110"), "data.csv:2", "strategy"),
        (CONFIG, DATA.replace("376,1111", "376,1110"), "data.csv:3", "zero type"),
        (CONFIG, DATA.replace("40,83", "40,nan"), "data.csv:2", "Tcc"),
        (CONFIG, DATA + "10,20,30,40,1100\n", "data.csv:4", "3 data rows but 2 config rows"),
        (CONFIG.replace("parameter_size", "params"), DATA, "config.csv:1", "parameter_size"),
        ("", DATA, "config.csv:1", "empty file"),
        (CONFIG, DATA.replace("63,158,148,376,1111", "63,158,148"), "data.csv:3", "fields"),
    ],
)
def test_profile_errors_name_file_line_and_field(config: str, data: str, where: str, field: str) -> None:
    with pytest.raises(DataError) as err:
        parse_profile(config, data, "config.csv", "data.csv")
    assert str(err.value).startswith(where + ":")
    assert field in str(err.value)


def test_load_profile_reports_missing_file(tmp_path: Path) -> None:
    (tmp_path / "config.csv").write_text(CONFIG)
    with pytest.raises(DataError, match=r"data\.csv:0: file not found"):
        load_profile(tmp_path)


PLACEMENTS = """exec_plan,placement,iter_time,forward,overlap_sync,optimize
ga,233,0.299,0.03,0.08,0.14
248,88888888,0.67,0,353.9,24.3

zero-offload+gc,4444,15.0,0,0,0
"""


def test_placements_parse_and_skip_blank_lines() -> None:
    rows = parse_placements(PLACEMENTS, "p.csv")
    assert [(r.plan.name, r.placement, r.iter_s, r.source) for r in rows] == [
        ("ga", (2, 3, 3), 0.299, "p.csv:2"),
        ("248", (8,) * 8, 0.67, "p.csv:3"),
        ("zero-offload+gc", (4, 4, 4, 4), 15.0, "p.csv:5"),
    ]


@pytest.mark.parametrize(
    ("text", "where", "field"),
    [
        (PLACEMENTS.replace("ga,233", "tp+ga,233"), "p.csv:2", "plan"),
        (PLACEMENTS.replace("248,88888888,0.67", "248,8888,0.67"), None, None),
        (PLACEMENTS.replace("ga,233", "ga,2x3"), "p.csv:2", "placement"),
        (PLACEMENTS.replace("15.0,0,0,0", "0,0,0,0"), "p.csv:5", "iter_time"),
        (PLACEMENTS.replace("0.299", "fast"), "p.csv:2", "iter_time"),
        ("exec_plan,iter_time\nga,1\n", "p.csv:1", "placement"),
        ("exec_plan,placement,iter_time\n", "p.csv:2", "no measurements"),
    ],
)
def test_placement_errors(text: str, where: str | None, field: str | None) -> None:
    if where is None:
        # A 3D plan whose degrees do not match the placement is data, not syntax:
        # the loader keeps it and the model rejects the query.
        assert parse_placements(text, "p.csv")[1].placement == (8, 8, 8, 8)
        return
    with pytest.raises(DataError) as err:
        parse_placements(text, "p.csv")
    assert str(err.value).startswith(where + ":") and field in str(err.value)


def test_load_placements_names_the_real_file(tmp_path: Path) -> None:
    path = tmp_path / "m.csv"
    path.write_text("exec_plan,placement,iter_time\nga,8,0\n")
    with pytest.raises(DataError, match=rf"{path}:2: iter_time='0' must be > 0"):
        load_placements(path)


AUTHORS = """model,k_bwd,k_sync,k_opt,k_os_offload,k_const,k_off,k_swap
vit,2.1,1.6,1.00E-08,2.6,7.5,16.6,18.4
llama7B,2,10,0.03,4,1.05,1.12,1000
"""


def test_authors_params() -> None:
    params = parse_authors_params(AUTHORS, "f.csv")
    assert params["vit"]["k_opt"] == 1e-8 and params["llama7B"]["k_swap"] == 1000.0


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (AUTHORS + "vit,1,1,1,1,1,1,1\n", "f.csv:4: model 'vit' listed twice"),
        (AUTHORS.replace("2.1,1.6", "2.1,x"), "f.csv:2: k_sync='x' is not a number"),
        (AUTHORS.replace(",k_swap", ""), "f.csv:1: missing column(s) k_swap"),
    ],
)
def test_authors_params_errors(text: str, message: str) -> None:
    with pytest.raises(DataError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_authors_params(text, "f.csv")


def test_env_bandwidth() -> None:
    assert parse_env_bandwidth('{"env_params": 6.89}', "e.json") == 6.89
    for bad in ('{"env_params": -1}', '{"other": 1}', "not json", '{"env_params": "fast"}'):
        with pytest.raises(DataError, match="e.json:1"):
            parse_env_bandwidth(bad, "e.json")
