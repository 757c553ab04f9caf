"""The confinement fields of the launch contract (run_as, limits, image) and the exit reasons they bring."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cluster import protocol

RANKED = dict(nodes=("gpu-a", "gpu-b", "gpu-c"), node_rank=1, master_addr="10.0.0.1", master_port=29612)

DIGEST = "sha256:" + "ab" * 32
BASE = {"job_id": "j", "attempt": 1, "command": "true"}


def test_confinement_fields_round_trip_through_json_kwargs():
    cmd = protocol.LaunchCommand(job_id=7, attempt=0, command="python t.py", run_as="alice", cpus=2.5,
                                 mem_bytes=4 << 30, image="pytorch:2.3", image_uri="/images/pytorch.tar",
                                 image_digest=DIGEST)
    assert protocol.LaunchCommand.from_kwargs(json.loads(json.dumps(cmd.to_kwargs()))) == cmd


def test_a_launch_without_the_confinement_fields_gets_the_defaults():
    cmd = protocol.LaunchCommand.from_kwargs(BASE)
    assert (cmd.run_as, cmd.cpus, cmd.mem_bytes, cmd.image, cmd.image_uri, cmd.image_digest) == ("", 0.0, 0, "", "", "")


def test_integer_cpus_are_accepted_as_a_float():
    assert protocol.LaunchCommand.from_kwargs({**BASE, "cpus": 3}).cpus == 3.0


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"run_as": "root user"}, "run_as"),
        ({"run_as": "Alice"}, "run_as"),
        ({"run_as": "-alice"}, "run_as"),
        ({"run_as": "a" * 33}, "run_as"),
        ({"run_as": "al/ice"}, "run_as"),
        ({"run_as": 1000}, "run_as"),
        ({"run_as": "alice\n"}, "run_as"),
        ({"image": "img\n", "image_uri": "/i.tar", "image_digest": DIGEST}, "image"),
        ({"image": "x", "image_uri": "/i.tar", "image_digest": DIGEST + "\n"}, "image_digest"),
        ({"cpus": -1}, "cpus"),
        ({"cpus": float("inf")}, "cpus"),
        ({"cpus": "2"}, "cpus"),
        ({"cpus": True}, "cpus"),
        ({"mem_bytes": -1}, "mem_bytes"),
        ({"mem_bytes": 1.5}, "mem_bytes"),
        ({"mem_bytes": "1G"}, "mem_bytes"),
        ({"image": "bad image", "image_uri": "/i.tar", "image_digest": DIGEST}, "image"),
        ({"image": "x", "image_uri": "relative.tar", "image_digest": DIGEST}, "image_uri"),
        ({"image": "x", "image_uri": "/i\x00.tar", "image_digest": DIGEST}, "image_uri"),
        ({"image": "x", "image_uri": "/i.tar", "image_digest": "md5:abc"}, "image_digest"),
        ({"image": "x", "image_uri": "/i.tar", "image_digest": "sha256:" + "AB" * 32}, "image_digest"),
        ({"image": "x"}, "image_uri"),
        ({"image": "x", "image_uri": "/i.tar"}, "image_digest"),
        ({"image_uri": "/i.tar", "image_digest": DIGEST}, "image"),
    ],
)
def test_bad_confinement_fields_are_rejected_by_name(change, field):
    with pytest.raises(protocol.ProtocolError) as err:
        protocol.LaunchCommand.from_kwargs({**BASE, **change})
    assert err.value.field == field
    assert str(err.value).startswith(f"{field}: ")


@pytest.mark.parametrize("name", ["alice", "gpusched-test-a", "_svc", "a.b", "u1000"])
def test_posix_user_names_are_accepted(name):
    assert protocol.LaunchCommand.from_kwargs({**BASE, "run_as": name}).run_as == name


def test_the_new_exit_reasons_are_distinct_short_words():
    reasons = {protocol.EXIT_OUT_OF_MEMORY, protocol.EXIT_IMAGE_UNAVAILABLE}
    assert len(reasons) == 2
    others = {protocol.EXIT_PREEMPT, protocol.EXIT_CANCEL, protocol.EXIT_TIMEOUT, protocol.EXIT_STALE,
              protocol.EXIT_LOST, protocol.EXIT_AGENT_STOP, protocol.EXIT_LAUNCH_FAILED}
    assert not reasons & others


def test_launch_command_round_trips_through_kwargs():
    cmd = protocol.LaunchCommand(job_id="j-1", attempt=2, command="python t.py", gpu_indices=(3, 1),
                                 grace_period=30, time_limit=600.0, env={"A": "1"}, resume=True)
    assert protocol.LaunchCommand.from_kwargs(json.loads(json.dumps(cmd.to_kwargs()))) == protocol.LaunchCommand(
        job_id="j-1", attempt=2, command="python t.py", gpu_indices=(3, 1), grace_period=30.0,
        time_limit=600.0, env={"A": "1"}, resume=True,
    )


def test_launch_command_defaults_and_ignores_unknown_fields():
    cmd = protocol.LaunchCommand.from_kwargs({"job_id": 5, "attempt": 0, "command": "true", "future_field": {"tp": 2}})
    assert (cmd.job_id, cmd.gpu_indices, cmd.grace_period, cmd.time_limit, cmd.env, cmd.resume) == (5, (), 0.0, None, {}, False)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"job_id": None}, "job_id"),
        ({"job_id": True}, "job_id"),
        ({"job_id": -1}, "job_id"),
        ({"job_id": "."}, "job_id"),
        ({"job_id": "a/b"}, "job_id"),
        ({"job_id": "j-1\n"}, "job_id"),
        ({"job_id": "x" * 129}, "job_id"),
        ({"attempt": -1}, "attempt"),
        ({"attempt": 1.0}, "attempt"),
        ({"command": ""}, "command"),
        ({"command": "  "}, "command"),
        ({"command": ["ls"]}, "command"),
        ({"gpu_indices": "0,1"}, "gpu_indices"),
        ({"gpu_indices": [0, -1]}, "gpu_indices[1]"),
        ({"gpu_indices": [True]}, "gpu_indices[0]"),
        ({"grace_period": -0.1}, "grace_period"),
        ({"grace_period": float("nan")}, "grace_period"),
        ({"grace_period": "30"}, "grace_period"),
        ({"time_limit": 0}, "time_limit"),
        ({"env": {"1BAD": "x"}}, "env"),
        ({"env": {"A=B": "x"}}, "env"),
        ({"env": {"A": 1}}, "env[A]"),
        ({"env": ["A"]}, "env"),
        ({"resume": "yes"}, "resume"),
    ],
)
def test_launch_command_rejects_bad_fields_by_name(change, field):
    kwargs = {"job_id": "j", "attempt": 1, "command": "true", **change}
    with pytest.raises(protocol.ProtocolError) as err:
        protocol.LaunchCommand.from_kwargs(kwargs)
    assert err.value.field == field
    assert str(err.value).startswith(f"{field}: ")


@pytest.mark.parametrize("missing", ["job_id", "attempt", "command"])
def test_launch_command_requires_its_identity_and_command(missing):
    kwargs = {"job_id": "j", "attempt": 1, "command": "true"}
    del kwargs[missing]
    with pytest.raises(protocol.ProtocolError, match=f"^{missing}: is required"):
        protocol.LaunchCommand.from_kwargs(kwargs)


def test_keep_lists_are_parsed_into_pairs():
    assert protocol.check_keep([["a", 1], [7, 2]]) == {("a", 1), (7, 2)}
    with pytest.raises(protocol.ProtocolError, match=r"^keep\[1\]\[1\]"):
        protocol.check_keep([["a", 1], ["b", "2"]])
    with pytest.raises(protocol.ProtocolError, match="^keep:"):
        protocol.check_keep("a")


def test_launch_command_carries_the_ranks_and_round_trips() -> None:
    cmd = protocol.LaunchCommand(job_id=15, attempt=2, command="x", gpu_indices=(0, 1), **RANKED)
    assert protocol.LaunchCommand.from_kwargs(cmd.to_kwargs()) == cmd
    # A server that does not send the fields yet: a single-node launch.
    old = {k: v for k, v in cmd.to_kwargs().items() if k not in ("nodes", "node_rank", "master_addr", "master_port")}
    back = protocol.LaunchCommand.from_kwargs(old)
    assert (back.nodes, back.node_rank, back.master_addr, back.master_port) == ((), 0, "", 0)


@pytest.mark.parametrize("field, value, named", [
    ("nodes", "gpu-a", "nodes"), ("nodes", ["gpu-a", "bad name"], "nodes[1]"), ("nodes", ["gpu-a", "gpu-a"], "nodes"),
    ("node_rank", 3, "node_rank"), ("node_rank", -1, "node_rank"), ("node_rank", True, "node_rank"),
    ("master_addr", "10.0.0.1; rm -rf /", "master_addr"), ("master_addr", 7, "master_addr"),
    ("master_port", 70000, "master_port"), ("master_port", "29500", "master_port"),
])
def test_bad_rank_fields_are_refused_naming_the_field(field: str, value: object, named: str) -> None:
    kwargs = {**protocol.LaunchCommand(job_id=1, attempt=1, command="x", **RANKED).to_kwargs(), field: value}
    with pytest.raises(protocol.ProtocolError) as err:
        protocol.LaunchCommand.from_kwargs(kwargs)
    assert err.value.field == named


def test_master_port_is_per_job_and_attempt_within_the_documented_range() -> None:
    assert protocol.master_port(15, 2) == 29500 + (15 * 7 + 2) % 1000
    assert protocol.master_port(15, 2) != protocol.master_port(15, 3)  # a relaunch does not reuse the port
    assert protocol.master_port(999_999, 1) == 29500 + (999_999 * 7 + 1) % 1000
    ports = {protocol.master_port(job, attempt) for job in range(300) for attempt in range(1, 4)}
    assert min(ports) >= protocol.MASTER_PORT_BASE and max(ports) < protocol.MASTER_PORT_BASE + protocol.MASTER_PORT_SPAN
    assert protocol.master_port("job-a", 1) == protocol.master_port("job-a", 1)  # stable for string ids too


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(1, 10**9), min_size=16, max_size=16, unique=True), st.integers(1, 50),
       st.permutations(list(range(16))), st.lists(st.integers(1, 4), min_size=1, max_size=16))
def test_jobs_running_at_once_on_a_node_never_share_a_master_port(job_ids, attempt, gpus, sizes) -> None:
    """The server keys the port by the job's first GPU on its rank-0 node: jobs holding disjoint GPUs of a
    node (up to MASTER_PORT_GPU_BLOCKS of them) get distinct ports, all inside the documented range."""
    held, start = [], 0
    for size in sizes:  # the node's GPUs dealt out to jobs in disjoint sets
        if start >= len(gpus):
            break
        held.append(gpus[start:start + size])
        start += size
    ports = [protocol.master_port(job, attempt, min(g)) for job, g in zip(job_ids, held)]
    assert len(set(ports)) == len(ports)
    low, high = protocol.MASTER_PORT_BASE, protocol.MASTER_PORT_BASE + protocol.MASTER_PORT_SPAN
    assert all(low <= p < high for p in ports)
    assert protocol.master_port(job_ids[0], attempt, 3) != protocol.master_port(job_ids[0], attempt + 1, 3)


def test_launch_command_carries_the_plan_and_round_trips() -> None:
    cmd = protocol.LaunchCommand(job_id=7, attempt=2, command="x", gpu_indices=(0,), plan="zero-dp", num_gpus=3,
                                 grad_accum_steps=2, requested_gpus=4)
    back = protocol.LaunchCommand.from_kwargs(cmd.to_kwargs())
    assert back == cmd
    # A server that does not send the fields yet: defaults, no plan.
    old = {k: v for k, v in cmd.to_kwargs().items() if k not in ("plan", "num_gpus", "grad_accum_steps", "requested_gpus")}
    assert protocol.LaunchCommand.from_kwargs(old).plan == ""


@pytest.mark.parametrize("field, value", [
    ("plan", "ga; rm -rf /"), ("plan", 3), ("num_gpus", -1), ("num_gpus", True), ("grad_accum_steps", 0),
    ("requested_gpus", 1.5),
])
def test_launch_command_refuses_a_bad_plan_field_by_name(field: str, value: object) -> None:
    kwargs = {"job_id": 1, "attempt": 1, "command": "x", field: value}
    with pytest.raises(protocol.ProtocolError) as exc:
        protocol.LaunchCommand.from_kwargs(kwargs)
    assert exc.value.field == field
