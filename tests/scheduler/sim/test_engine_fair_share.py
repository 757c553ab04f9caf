"""Fair share in the simulator: convergence to shares, borrowing and reclaim."""

from __future__ import annotations

import csv

from scheduler.core.model import JobClass, JobSpec, NodeCapacity
from scheduler.core.policy import make_policy
from scheduler.sim.cli import main
from scheduler.sim.engine import simulate
from scheduler.sim.records import SimConfig
from scheduler.sim.workloads.types import SimJob

BE, TE = JobClass.BE, JobClass.TE
H = 3600.0


def be(jid, tenant, gpus, submit, duration, grace=30.0):
    return SimJob(JobSpec(jid, BE, gpus, submit, grace_period=grace, tenant=tenant, user=f"{tenant}-u"), duration)


def held_between(result, tenant_of, lo, hi):
    """GPU-seconds each tenant held in [lo, hi)."""
    out: dict[str, float] = {}
    for a in result.attempts:
        overlap = min(a.end, hi) - max(a.start, lo)
        if overlap > 0:
            t = tenant_of[a.job_id]
            out[t] = out.get(t, 0.0) + a.placement.num_gpus * overlap
    return out


def test_shares_converge_when_both_tenants_are_backlogged():
    # 8 GPUs; a (share 3) and b (share 1) each keep far more 1-GPU jobs queued
    # than the cluster holds; a's arrive first. Over the busy period the GPU
    # time splits 3:1.
    jobs = [be(f"a{i:03d}", "a", 1, 0.0, 1800.0) for i in range(200)]
    jobs += [be(f"b{i:03d}", "b", 1, 1.0, 1800.0) for i in range(200)]
    config = SimConfig(record_attempts=True, shares={"a": 3.0, "b": 1.0}, half_life=H)
    result = simulate(make_policy("fitgpp", explain=False), [NodeCapacity("n1", 8)], jobs, config)
    held = held_between(result, {j.spec.id: j.spec.tenant for j in jobs}, 2 * H, 12 * H)
    assert abs(held["a"] / (held["a"] + held["b"]) - 0.75) < 0.05
    # Fair share off: first come, first served, a takes everything first.
    off = simulate(make_policy("fitgpp", explain=False), [NodeCapacity("n1", 8)], jobs, SimConfig(record_attempts=True))
    held_off = held_between(off, {j.spec.id: j.spec.tenant for j in jobs}, 2 * H, 12 * H)
    assert held_off.get("b", 0.0) == 0.0


def test_borrowing_then_reclaim_after_the_minimum_runtime():
    # a borrows the whole idle cluster; b arrives 5 minutes later. With a
    # 20-minute minimum runtime, a's jobs are preempted at 20 min, not before;
    # b gets its half, a keeps the other half.
    jobs = [be(f"a{i}", "a", 2, 0.0, 10 * H, grace=60.0) for i in range(4)]
    jobs += [be(f"b{i}", "b", 2, 300.0, H) for i in range(2)]
    config = SimConfig(record_attempts=True, shares={}, half_life=H)
    policy = make_policy("te-priority", explain=False, reclaim_min_runtime=1200.0)
    result = simulate(policy, [NodeCapacity("n1", 8)], jobs, config)
    notices = sorted((p.time, p.job_id, p.for_job) for p in result.preemptions)
    assert len(notices) == 2
    assert all(t == 1200.0 and jid.startswith("a") and for_job.startswith("b") for t, jid, for_job in notices)
    starts = {a.job_id: a.start for a in result.attempts if a.job_id.startswith("b")}
    assert starts == {"b0": 1260.0, "b1": 1260.0}  # after the victims' 60 s grace
    # Without fair share nobody is preempted and b waits for a's 10-hour jobs.
    off = simulate(make_policy("te-priority", explain=False), [NodeCapacity("n1", 8)], jobs, SimConfig())
    assert not off.preemptions


def test_cli_json_and_jobs_csv(tmp_path):
    out, rows = tmp_path / "r.json", tmp_path / "jobs.csv"
    argv = ["--policy", "fitgpp", "--workload", "synthetic", "--jobs", "120", "--cluster", "2x8", "--no-progress",
            "--flood", "t1:2", "--fair-share", "--json", str(out), "--jobs-csv", str(rows)]
    assert main(argv) == 0
    import json

    result = json.loads(out.read_text())[0]
    assert set(result["tenants"]) == {"t0", "t1", "t2", "t3"}
    for t in result["tenants"].values():
        assert set(t) == {"configured_share", "gpu_seconds", "jobs", "te_p95_slowdown", "be_median_slowdown"}
    assert result["tenants"]["t1"]["jobs"] > result["tenants"]["t0"]["jobs"]
    fair = result["fair_share"]
    assert fair["window_seconds"] == 21600 and fair["tenant_windows"] >= 0
    assert set(fair["attainment"]) == {"p10", "median"}
    with open(rows, newline="") as f:
        table = list(csv.DictReader(f))
    assert list(table[0]) == ["policy", "job_id", "tenant", "user", "job_class", "num_gpus", "submit_time",
                              "attempt", "start_time", "end_time", "outcome"]
    completed = [r for r in table if r["outcome"] == "completed"]
    assert len(completed) == result["jobs"]
    assert {r["outcome"] for r in table} <= {"completed", "preempted"}
    assert all(float(r["start_time"]) >= float(r["submit_time"]) for r in table)
