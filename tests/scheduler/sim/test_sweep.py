"""The sweep helper: paper-bar check and one row per (value, policy)."""

from __future__ import annotations

from scheduler.sim.records import SimConfig
from scheduler.sim.runner import parse_policy_spec
from scheduler.sim.sweep import markdown, meets_bar, sweep
from scheduler.sim.workloads.synthetic import SyntheticConfig


def test_paper_bar_boundaries():
    base = {"te_p95": 100.0, "be_p50": 2.0, "be_p95": 10.0}
    assert meets_bar({"te_p95": 3.4, "be_p50": 2.35, "be_p95": 12.38}, base)
    assert not meets_bar({"te_p95": 3.5, "be_p50": 2.0, "be_p95": 10.0}, base)  # -96.5 %
    assert not meets_bar({"te_p95": 1.0, "be_p50": 2.37, "be_p95": 10.0}, base)  # +18.5 %
    assert not meets_bar({"te_p95": 1.0, "be_p50": 2.0, "be_p95": 12.4}, base)  # +24 %
    assert not meets_bar({"te_p95": None, "be_p50": 2.0, "be_p95": 10.0}, base)


def test_sweep_rows_state_fifo_te_p95_beside_every_policy():
    specs = [parse_policy_spec(n) for n in ("fifo", "fitgpp")]
    base = SyntheticConfig(jobs=60, nodes=2, gpus_per_node=4)
    records = sweep("load", [0.8, 1.2], specs, base, SimConfig())
    assert [(r["value"], r["policy"]) for r in records] == [(0.8, "fifo"), (0.8, "fitgpp"), (1.2, "fifo"), (1.2, "fitgpp")]
    for r in records:
        fifo = next(x for x in records if x["value"] == r["value"] and x["policy"] == "fifo")
        assert r["fifo_te_p95"] == fifo["te_p95"]
    assert records[0]["meets_paper_bar"] is None and records[1]["meets_paper_bar"] in (True, False)
    table = markdown(records).splitlines()
    assert table[0].startswith("| load | policy | FIFO TE p95 |")
    assert len(table) == 2 + len(records)
