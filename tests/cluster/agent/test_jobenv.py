"""The environment a job starts with: the contract variables, ranks, the plan, nothing private of the agent."""

from __future__ import annotations

from pathlib import Path

from cluster import protocol
from cluster.agent import jobenv

RANKED = dict(nodes=("gpu-a", "gpu-b", "gpu-c"), node_rank=1, master_addr="10.0.0.1", master_port=29612)


def test_job_environment_sets_the_contract_last_and_drops_private_variables():
    base = {"PATH": "/bin", protocol.ENV_AGENT_TOKEN: "t", "REDIS_URL": "redis://:pw@h/0", "CELERY_BROKER_URL": "x"}
    cmd = protocol.LaunchCommand(job_id=9, attempt=2, command="x", gpu_indices=(2, 0), grace_period=30.0,
                                 env={"CUDA_VISIBLE_DEVICES": "spoof", "LR": "0.1", "PYTHONUNBUFFERED": "0"}, resume=True)
    env = jobenv.job_environment(base, cmd, node="n1", checkpoint_dir=Path("/ck/9"))
    assert env == {
        "PATH": "/bin", "PYTHONUNBUFFERED": "0", "LR": "0.1",
        "CUDA_VISIBLE_DEVICES": "2,0", "CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CHECKPOINT_DIR": "/ck/9",
        "RESUME": "1", "GRACE_PERIOD": "30", "GPUSCHED_JOB_ID": "9", "GPUSCHED_ATTEMPT": "2", "GPUSCHED_NODE": "n1",
        # A launch without nodes (an older server): a single-node job mastered here.
        "GPUSCHED_NODES": "n1", "GPUSCHED_NUM_NODES": "1", "GPUSCHED_NODE_RANK": "0",
        "GPUSCHED_MASTER_ADDR": "127.0.0.1", "GPUSCHED_MASTER_PORT": "29565",
        "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29565", "NNODES": "1", "NODE_RANK": "0",
    }
    first = jobenv.job_environment({}, protocol.LaunchCommand(job_id="a", attempt=1, command="x", grace_period=2.5),
                                   node="n", checkpoint_dir=Path("/c"))
    assert (first["RESUME"], first["GRACE_PERIOD"], first["CUDA_VISIBLE_DEVICES"], first["PYTHONUNBUFFERED"]) == ("0", "2.5", "", "1")


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


def test_job_environment_exports_the_plan_only_when_the_launch_names_one() -> None:
    cmd = protocol.LaunchCommand(job_id=7, attempt=2, command="x", gpu_indices=(1, 3), plan="244", num_gpus=32,
                                 grad_accum_steps=4, requested_gpus=8, env={"GPUSCHED_PLAN": "spoofed"})
    env = jobenv.job_environment({}, cmd, node="n1", checkpoint_dir=Path("/ck/7"))
    assert (env["GPUSCHED_PLAN"], env["GPUSCHED_NUM_GPUS"], env["GPUSCHED_GRAD_ACCUM_STEPS"],
            env["GPUSCHED_REQUESTED_GPUS"]) == ("244", "32", "4", "8")
    assert env["CUDA_VISIBLE_DEVICES"] == "1,3"
    # Without a plan nothing is exported, not even what the agent's own environment holds.
    plain = protocol.LaunchCommand(job_id=8, attempt=1, command="x", gpu_indices=(0,))
    env = jobenv.job_environment({"GPUSCHED_PLAN": "ga", "GPUSCHED_NUM_GPUS": "9"}, plain, node="n1",
                                 checkpoint_dir=Path("/ck/8"))
    assert "GPUSCHED_PLAN" not in env and "GPUSCHED_NUM_GPUS" not in env
