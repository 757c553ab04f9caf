"""The shim's confinement options (the shim itself is exercised in test_agent_shim_and_examples.py)."""

from __future__ import annotations

import pytest

from cluster.agent.shim import Options


def test_identity_options_become_popen_arguments_with_no_new_privs():
    options = Options(["--cgroup-procs", "/cg/a/cgroup.procs", "--uid", "1801", "--gid", "1801", "--groups", "1801,27"])
    identity = options.popen_identity()
    assert (identity["user"], identity["group"], identity["extra_groups"]) == (1801, 1801, [1801, 27])
    assert identity["preexec_fn"].__name__ == "_no_new_privs"
    assert options.cgroup_procs == ["/cg/a/cgroup.procs"]


def test_without_a_uid_the_job_keeps_the_shims_identity():
    assert Options([]).popen_identity() == {}


@pytest.mark.parametrize("args", [["--uid", "1801"], ["--uid", "0", "--gid", "0"], ["--bogus", "1"]])
def test_incomplete_root_or_unknown_options_are_refused(args):
    with pytest.raises(ValueError):
        Options(args)
