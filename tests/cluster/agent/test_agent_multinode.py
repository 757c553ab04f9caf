"""What a multi-node job's ranks are told: the launch's node-rank fields, their validation, the
environment the agent exports from them, and the agent's advertised address (no Django)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cluster import protocol
from cluster.agent import config, jobenv

RANKED = dict(nodes=("gpu-a", "gpu-b", "gpu-c"), node_rank=1, master_addr="10.0.0.1", master_port=29612)


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


def _env(cmd: protocol.LaunchCommand, base: dict[str, str] | None = None, **kw: str) -> dict[str, str]:
    return jobenv.job_environment(base or {}, cmd, node=kw.pop("node", "gpu-b"), checkpoint_dir=Path("/ck"), **kw)


def test_a_rank_gets_the_node_list_its_rank_and_the_master() -> None:
    env = _env(protocol.LaunchCommand(job_id=15, attempt=2, command="x", gpu_indices=(0, 1), **RANKED))
    assert {k: env[k] for k in env if k.startswith("GPUSCHED_N") or "MASTER" in k or k in ("NNODES", "NODE_RANK")} == {
        "GPUSCHED_NODE": "gpu-b", "GPUSCHED_NODES": "gpu-a,gpu-b,gpu-c", "GPUSCHED_NUM_NODES": "3",
        "GPUSCHED_NODE_RANK": "1", "GPUSCHED_MASTER_ADDR": "10.0.0.1", "GPUSCHED_MASTER_PORT": "29612",
        "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29612", "NNODES": "3", "NODE_RANK": "1",
    }


def test_the_launch_env_keeps_its_own_rendezvous_and_the_agents_environment_does_not() -> None:
    cmd = protocol.LaunchCommand(job_id=15, attempt=2, command="x", env={"MASTER_PORT": "12345", "NODE_RANK": "7",
                                                                       "GPUSCHED_NODE_RANK": "9"}, **RANKED)
    env = _env(cmd, base={"MASTER_ADDR": "stale-host", "NNODES": "99"})
    assert (env["MASTER_PORT"], env["NODE_RANK"]) == ("12345", "7")  # the job chose them
    assert (env["MASTER_ADDR"], env["NNODES"]) == ("10.0.0.1", "3")  # inherited from the agent: replaced
    assert env["GPUSCHED_NODE_RANK"] == "1"  # the contract variables cannot be spoofed


def test_a_launch_without_nodes_is_a_single_node_job_mastered_on_loopback() -> None:
    cmd = protocol.LaunchCommand(job_id=15, attempt=1, command="x", gpu_indices=(0,))
    env = _env(cmd, node="gpu-b", address="192.0.2.2")
    assert (env["GPUSCHED_NODES"], env["GPUSCHED_NUM_NODES"], env["GPUSCHED_NODE_RANK"]) == ("gpu-b", "1", "0")
    assert env["GPUSCHED_MASTER_ADDR"] == env["MASTER_ADDR"] == "127.0.0.1"
    assert env["GPUSCHED_MASTER_PORT"] == str(protocol.master_port(15, 1))
    assert _env(cmd, node="gpu-b")["GPUSCHED_MASTER_ADDR"] == "127.0.0.1"


def test_a_single_node_launch_from_the_server_is_mastered_on_loopback_not_the_advertised_address() -> None:
    cmd = protocol.LaunchCommand(job_id=15, attempt=1, command="x", gpu_indices=(0,), nodes=("gpu-b",),
                                 node_rank=0, master_addr="192.0.2.2", master_port=29612)
    env = _env(cmd, node="gpu-b", address="192.0.2.2")
    assert env["GPUSCHED_MASTER_ADDR"] == env["MASTER_ADDR"] == "127.0.0.1"
    assert env["GPUSCHED_MASTER_PORT"] == "29612"


def test_advertise_address_option() -> None:
    parsed = config.parse_args(["--name", "n", "--gpus", "1", "--advertise-address", "10.1.2.3"], environ={})
    assert parsed.advertise_address == "10.1.2.3"
    assert config.parse_args(["--name", "n", "--gpus", "1"], environ={}).advertise_address == ""  # resolved at start
    with pytest.raises(SystemExit):
        config.parse_args(["--name", "n", "--gpus", "1", "--advertise-address", "a b"], environ={})


def test_default_advertise_address_prefers_the_fqdn_then_the_default_route(monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.setattr(config.socket, "getfqdn", lambda: "gpu7.cluster.example.org")
    assert config.default_advertise_address("n") == "gpu7.cluster.example.org"

    class Probe:
        def __init__(self, *args: object) -> None:
            pass

        def __enter__(self) -> "Probe":
            return self

        def __exit__(self, *exc: object) -> None:
            pass

        def connect(self, where: tuple[str, int]) -> None:
            assert where == config._ROUTE_PROBE

        def getsockname(self) -> tuple[str, int]:
            return ("192.168.7.20", 40000)

    monkeypatch.setattr(config.socket, "getfqdn", lambda: "gpu7")  # not qualified: other nodes may not resolve it
    monkeypatch.setattr(config.socket, "socket", Probe)
    assert config.default_advertise_address("n") == "192.168.7.20"

    def no_route(self: Probe, where: tuple[str, int]) -> None:
        raise OSError("Network is unreachable")

    monkeypatch.setattr(Probe, "connect", no_route)
    assert config.default_advertise_address("n") == "n"
