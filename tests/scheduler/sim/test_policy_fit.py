"""A policy that resizes adaptive or reconfigurable jobs says so when the workload has none."""

from __future__ import annotations

import pytest

from scheduler.core.policy import make_policy, policy_names
from scheduler.sim.policy_fit import has_kind, idle_note
from scheduler.sim.workloads.synthetic import SyntheticConfig, generate

RESIZING = {"pollux": "adaptive", "optimus": "adaptive", "rubick": "reconfigurable", "fitgpp-shrink": "reconfigurable"}


@pytest.mark.parametrize("name", policy_names())
def test_exactly_the_resizing_policies_note_a_workload_of_plain_jobs(name) -> None:
    plain = generate(SyntheticConfig(jobs=20, seed=1))
    assert not has_kind(plain, "adaptive") and not has_kind(plain, "reconfigurable")
    note = idle_note(make_policy(name), name, plain)
    if name in RESIZING:
        assert note is not None and note.startswith(f"{name} resizes only {RESIZING[name]} jobs")
    else:
        assert note is None


def test_no_note_where_the_workload_has_jobs_of_the_kind() -> None:
    from tests.support.traces import require_trace

    from scheduler.sim.morphling import load_morphling

    path = require_trace("morphling/workloads/workload-base.csv")
    workload = load_morphling(str(path))
    assert has_kind(workload, "reconfigurable")
    assert idle_note(make_policy("rubick"), "rubick", workload) is None
    assert idle_note(make_policy("pollux"), "pollux", workload) is not None
