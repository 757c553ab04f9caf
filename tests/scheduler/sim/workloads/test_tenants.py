"""Tenants of the workloads: Philly's virtual clusters, the synthetic tenants and the flood."""

from __future__ import annotations

import pytest

from scheduler.sim.workloads.philly import load_philly
from scheduler.sim.workloads.synthetic import SyntheticConfig, generate

PHILLY = """timestamp,duration,num_gpus,gpu_time,cluster
2017-10-01 00:10:00,600.0,1,600.0,vc-a
2017-10-01 00:00:00,3600.0,8,28800.0,vc-b
"""


def test_philly_virtual_cluster_is_the_tenant(tmp_path):
    path = tmp_path / "philly.csv"
    path.write_text(PHILLY)
    assert [(j.spec.id, j.spec.tenant) for j in load_philly(path).jobs] == [("philly-3", "vc-b"), ("philly-2", "vc-a")]
    # Without the column every job has the empty tenant.
    path.write_text("timestamp,duration,num_gpus\n2017-10-01 00:10:00,600.0,1\n")
    assert [j.spec.tenant for j in load_philly(path).jobs] == [""]


def test_synthetic_tenants_do_not_change_the_jobs():
    a = generate(SyntheticConfig(jobs=300, tenants=4))
    b = generate(SyntheticConfig(jobs=300, tenants=2, users_per_tenant=1))
    strip = [(j.spec.id, j.spec.job_class, j.spec.num_gpus, j.spec.submit_time, j.duration) for j in a.jobs]
    assert strip == [(j.spec.id, j.spec.job_class, j.spec.num_gpus, j.spec.submit_time, j.duration) for j in b.jobs]
    assert {j.spec.tenant for j in a.jobs} == {"t0", "t1", "t2", "t3"}
    assert all(j.spec.user.startswith(j.spec.tenant + "-u") for j in a.jobs)
    assert {j.spec.user for j in b.jobs} == {"t0-u0", "t1-u0"}


def test_flood_multiplies_one_tenants_jobs_and_leaves_the_others():
    base = generate(SyntheticConfig(jobs=400))
    flooded = generate(SyntheticConfig(jobs=400, flood=("t2", 3.0)))
    own = [j for j in base.jobs if j.spec.tenant == "t2"]
    extra = [j for j in flooded.jobs if j.spec.id.startswith("f")]
    assert len(extra) == 2 * len(own) and {j.spec.tenant for j in extra} == {"t2"}
    assert [j for j in flooded.jobs if not j.spec.id.startswith("f")] == base.jobs
    times = [j.spec.submit_time for j in flooded.jobs]
    assert times == sorted(times)
    assert "flood=t2:3" in flooded.name


@pytest.mark.parametrize("flood", [("t9", 2.0), ("t0", 0.5), ("t0", float("nan"))])
def test_bad_flood_is_refused_naming_it(flood):
    with pytest.raises(ValueError, match="flood"):
        SyntheticConfig(flood=flood)
