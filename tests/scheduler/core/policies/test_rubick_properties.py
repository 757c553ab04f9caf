"""Invariants of ``rubick`` on random snapshots (hypothesis).

* capacity: applying the decisions the way the simulator does (the
  Reconfigures of a call together, then Starts) never puts more GPUs or CPUs
  on a node than it has, counting jobs that are vacating or checkpointing;
* guaranteed jobs: every Start of one gives it at least the throughput of
  its request (when some allocation of the whole cluster does), and a
  Reconfigure never takes it below that (one the snapshot has below it may
  only get faster); none is preempted; a guaranteed job left
  pending, with nothing being freed for it, has no room for its request on
  any single node after the decisions (the floor is held whenever feasible;
  anti-starvation is off here, since it may hold a feasible job back);
* no job is reconfigured within ``min_interval`` of its last reconfiguration,
  and no vacating or checkpointing job is touched;
* the same snapshot gives the same decisions.
"""

from __future__ import annotations

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from scheduler.core.decisions import Preempt, Reconfigure, Start
from scheduler.core.model import JobClass, JobSpec, NodeCapacity, PendingJob, Placement, RunningJob, Snapshot
from scheduler.core.policies.rubick import Rubick
from tests.support.fake_throughput import FakeThroughput, dp_curve, elastic_spec, running

EPS = 1e-9


@st.composite
def throughputs(draw, max_gpus: int) -> FakeThroughput:
    plans = {}
    for name in draw(st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=3, unique=True)):
        curve = dp_curve(draw(st.floats(0.5, 8.0)), max_gpus, draw(st.floats(0.5, 1.0)))
        low = draw(st.integers(1, max_gpus))
        plans[name] = {g: t for g, t in curve.items() if g >= low or g == max_gpus}
    user_plan = draw(st.sampled_from(sorted(plans)))
    user_gpus = draw(st.sampled_from(sorted(plans[user_plan])))
    return FakeThroughput(plans, user_plan, user_gpus, node_penalty=draw(st.sampled_from([1.0, 1.25, 2.0])))


@st.composite
def snapshots(draw):
    node_gpus = draw(st.sampled_from([2, 4, 8]))
    cpus = draw(st.sampled_from([0.0, 4.0 * node_gpus]))
    nodes = [NodeCapacity(f"n{i}", node_gpus, cpus) for i in range(draw(st.integers(1, 3)))]
    total = node_gpus * len(nodes)
    free = {n.name: node_gpus for n in nodes}
    now = 10_000.0
    running_jobs: list[RunningJob] = []
    pending_jobs: list[PendingJob] = []
    for i in range(draw(st.integers(1, 8))):
        fn = draw(throughputs(total))
        cpg = 2.0 if cpus else 0.0
        elastic = draw(st.integers(0, 3)) > 0
        if elastic:
            spec = elastic_spec(f"j{i}", fn.user_gpus, fn, submit=float(i), steps=draw(st.integers(1, 100_000)),
                                guaranteed=draw(st.booleans()), hi=total, cpus=cpg * fn.user_gpus,
                                lo=draw(st.integers(1, 2)),
                                grace=draw(st.sampled_from([0.0, 0.0, 30.0])))
        else:
            spec = JobSpec(f"j{i}", JobClass.BE, draw(st.integers(1, total)), float(i), num_cpus=0.0)
        if draw(st.integers(0, 3)) > 0:
            want = draw(st.integers(1, total))
            where: dict[str, int] = {}
            for name in sorted(free):
                take = min(free[name], want - sum(where.values()))
                if take > 0:
                    where[name] = take
            if not where:
                pending_jobs.append(PendingJob(spec))
                continue
            if elastic and fn.best([k for k in where.values()]) is not None:
                plan = fn.best(list(where.values()))[0]
                last = draw(st.one_of(st.none(), st.floats(0.0, now)))
                state = draw(st.sampled_from(["run", "run", "preempting", "reconfiguring"]))
                r = running(spec, where, plan, steps_done=draw(st.floats(0, spec.steps)), last_reconfigure=last,
                            preempting=state == "preempting", reconfiguring=state == "reconfiguring",
                            notice_time=now - 1 if state != "run" else None)
            elif not elastic:
                placement = Placement.of(where)
                from dataclasses import replace

                alloc = replace(spec, num_gpus=placement.num_gpus)
                r = RunningJob(alloc, placement, 0.0, 0.0)
            else:
                pending_jobs.append(PendingJob(spec))
                continue
            for name, k in where.items():
                free[name] -= k
            running_jobs.append(r)
        else:
            pending_jobs.append(PendingJob(spec))
    pending_jobs.sort(key=lambda p: (p.spec.submit_time, p.spec.id))
    params = {
        "restart_time": draw(st.sampled_from([0.0, 60.0, 600.0])),
        "min_interval": draw(st.sampled_from([0.0, 600.0, 5000.0])),
        "min_gain": draw(st.sampled_from([0.0, 0.05, 0.5])),
        "max_preemptions": draw(st.sampled_from([0, 3])),
        "starvation_threshold": None,
    }
    return Snapshot(nodes, running_jobs, pending_jobs), now, params


def reachable(spec: JobSpec, nodes) -> bool:
    """Does some allocation (packed on whole nodes) reach the request?"""
    fn, node_gpus = spec.throughput, nodes[0].gpus
    for g in range(1, node_gpus * len(nodes) + 1):
        full, rest = divmod(g, node_gpus)
        best = fn.best([node_gpus] * full + ([rest] if rest else []))
        if best is not None and fn.reference() / best[1] >= 1.0 - EPS:
            return True
    return False


def speed(spec: JobSpec, plan: str, placement: Placement) -> float:
    fn = spec.throughput
    return fn.reference() / fn.time(plan, [k for _, k in placement.parts])


def apply(snapshot: Snapshot, decisions) -> dict[str, list[float]]:
    """Free GPUs and CPUs per node after the decisions, the simulator's way."""
    free = {n.name: [float(n.gpus), n.cpus if n.cpus > 0 else float("inf")] for n in snapshot.nodes}

    def charge(spec: JobSpec, placement: Placement, sign: float, cpus: float | None = None) -> None:
        g = placement.num_gpus
        total_cpus = spec.num_cpus * g / spec.num_gpus if cpus is None else cpus
        for name, k in placement.parts:
            free[name][0] -= sign * k
            free[name][1] -= sign * total_cpus * k / g

    for r in snapshot.running:
        charge(r.spec, r.placement, 1.0, r.spec.num_cpus)
    by_id = {r.spec.id: r for r in snapshot.running}
    pend_by_id = {p.spec.id: p for p in snapshot.pending}
    reconf = [d for d in decisions if isinstance(d, Reconfigure)]
    immediate = []
    for d in reconf:
        r = by_id[d.job_id]
        new = dict(d.placement.parts)
        subset = all(new.get(n, 0) <= k for n, k in r.placement.parts) and set(new) <= set(dict(r.placement.parts))
        if not (r.spec.grace_period > 0 and subset):
            immediate.append((r, d))
    for r, _ in immediate:
        charge(r.spec, r.placement, -1.0, r.spec.num_cpus)
    for r, d in immediate:
        charge(r.spec, d.placement, 1.0, d.cpus)
        assert all(v[0] >= -EPS and v[1] >= -EPS for v in free.values()), (d, free)
    for d in decisions:
        if isinstance(d, Start):
            charge(pend_by_id[d.job_id].spec, d.placement, 1.0, d.cpus)
            assert all(v[0] >= -EPS and v[1] >= -EPS for v in free.values()), (d, free)
    return free


def single_node_right_size(spec: JobSpec, node_gpus: int) -> int | None:
    fn = spec.throughput
    for g in range(spec.gpu_range[0], min(spec.gpu_range[1], node_gpus) + 1):
        best = fn.best([g])
        if best is not None and fn.reference() / best[1] >= 1.0 - EPS:
            return g
    return None


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snapshots())
def test_rubick_invariants(case):
    snapshot, now, params = case
    policy = Rubick(explain=True, **params)
    decisions = policy.decide(snapshot, now)
    assert decisions == Rubick(explain=True, **params).decide(snapshot, now)
    free = apply(snapshot, decisions)
    for kind in {type(d).__name__ for d in decisions}:
        event(f"decided a {kind}")
    running_by_id = {r.spec.id: r for r in snapshot.running}
    pending_by_id = {p.spec.id: p for p in snapshot.pending}
    preempted_for = {d.for_job for d in decisions if isinstance(d, Preempt)}
    for d in decisions:
        if isinstance(d, Reconfigure):
            r = running_by_id[d.job_id]
            assert not (r.preempting or r.reconfiguring)
            assert r.last_reconfigure is None or now - r.last_reconfigure >= params["min_interval"] - 1e-6
            if r.spec.guaranteed and reachable(r.spec, snapshot.nodes):
                # Never below the request; a job the snapshot has below it may only get faster.
                before = speed(r.spec, r.plan, r.placement)
                assert speed(r.spec, d.plan, d.placement) >= min(1.0, before) - EPS
        elif isinstance(d, Start):
            spec = pending_by_id[d.job_id].spec
            if spec.guaranteed and spec.reconfigurable and reachable(spec, snapshot.nodes):
                assert speed(spec, d.plan, d.placement) >= 1.0 - EPS
        elif isinstance(d, Preempt):
            r = running_by_id[d.job_id]
            assert not r.spec.guaranteed and not (r.preempting or r.reconfiguring)
    started = {d.job_id for d in decisions if isinstance(d, Start)}
    awaited = {r.preempted_for for r in snapshot.running if r.preempting}
    awaited |= {r.reconfigured_for for r in snapshot.running if r.reconfiguring}
    awaited |= preempted_for | {d.for_job for d in decisions if isinstance(d, Reconfigure)}
    node_gpus = snapshot.nodes[0].gpus
    for p in snapshot.pending:
        spec = p.spec
        if not (spec.guaranteed and spec.reconfigurable) or spec.id in started or spec.id in awaited:
            continue
        need = single_node_right_size(spec, node_gpus)
        if need is None:
            continue
        cpus = spec.num_cpus / spec.num_gpus * need
        event("guaranteed job left pending: checked there was no room")
        assert not any(g >= need and c >= cpus - EPS for g, c in free.values()), (spec.id, need, free)
