"""The environment a job process starts with: built from scratch, never the agent's own.

A job gets the identity variables of the user it runs as (HOME, USER, LOGNAME,
SHELL), a PATH and a locale, then the launch's ``env``, then the contract
variables. Nothing the agent holds (its token, the broker URL and its
password, whatever else its environment carries) reaches a job.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from cluster import protocol

# Never handed to jobs: the node's secret and broker URLs (which may hold a password).
PRIVATE_VARS = frozenset({protocol.ENV_AGENT_TOKEN, "CELERY_BROKER_URL", "REDIS_URL"})


# Where jobs look for programs; a node's agent runs as root, whose PATH is not the users'.
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"


def base_environment(*, home: str, user: str, path: str = DEFAULT_PATH) -> dict[str, str]:
    """What every job of ``user`` starts from, before the launch's ``env`` and the contract variables."""
    return {"PATH": path, "HOME": home, "USER": user, "LOGNAME": user, "SHELL": "/bin/sh", "LANG": "C.UTF-8"}


def format_seconds(value: float) -> str:
    """30.0 -> "30", 2.5 -> "2.5": what a shell script can use directly."""
    return f"{value:g}"


def job_environment(
    base: Mapping[str, str],
    cmd: protocol.LaunchCommand,
    *,
    node: str,
    checkpoint_dir: Path,
    address: str = "",
) -> dict[str, str]:
    """``base`` minus private variables, then the launch's ``env``, then the contract variables.

    The contract variables (cluster/protocol.py ENV_*) are set last so a
    launch's ``env`` cannot spoof them. PYTHONUNBUFFERED defaults to 1 so Python
    jobs' output reaches the log (and the portal) as it is printed.

    The node-rank variables (GPUSCHED_NODES and friends) come from the launch;
    a launch that names no nodes is a single-node job: this ``node``, rank 0;
    a single-node job's master is 127.0.0.1 (``address`` serves multi-node jobs only). MASTER_ADDR, MASTER_PORT,
    NNODES and NODE_RANK, the names torchrun reads, copy them unless the
    launch's ``env`` sets them (a job that chose its own rendezvous keeps it);
    values inherited from the agent's environment are replaced.
    """
    env = {k: v for k, v in base.items() if k not in PRIVATE_VARS}
    env.setdefault("PYTHONUNBUFFERED", "1")
    env.update(cmd.env)
    env.update(
        {
            protocol.ENV_VISIBLE_DEVICES: ",".join(str(i) for i in cmd.gpu_indices),
            # NVML and the agent number GPUs in PCI bus order; make CUDA agree.
            "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
            protocol.ENV_CHECKPOINT_DIR: str(checkpoint_dir),
            protocol.ENV_RESUME: "1" if cmd.resume else "0",
            protocol.ENV_GRACE_PERIOD: format_seconds(cmd.grace_period),
            protocol.ENV_JOB_ID: str(cmd.job_id),
            protocol.ENV_ATTEMPT: str(cmd.attempt),
            "GPUSCHED_NODE": node,
        }
    )
    env.update(rank_environment(cmd, node=node, address=address))
    for alias, source in protocol.LAUNCHER_ALIASES.items():
        if alias not in cmd.env:
            env[alias] = env[source]
    if cmd.plan:
        env.update(
            {
                protocol.ENV_PLAN: cmd.plan,
                protocol.ENV_NUM_GPUS: str(cmd.num_gpus or len(cmd.gpu_indices)),
                protocol.ENV_GRAD_ACCUM_STEPS: str(cmd.grad_accum_steps),
                protocol.ENV_REQUESTED_GPUS: str(cmd.requested_gpus or cmd.num_gpus or len(cmd.gpu_indices)),
            }
        )
    else:  # a job without a plan must not inherit these from the agent's environment
        for name in (protocol.ENV_PLAN, protocol.ENV_NUM_GPUS, protocol.ENV_GRAD_ACCUM_STEPS, protocol.ENV_REQUESTED_GPUS):
            env.pop(name, None)
    return env


def rank_environment(cmd: protocol.LaunchCommand, *, node: str, address: str = "") -> dict[str, str]:
    """GPUSCHED_NODES, _NUM_NODES, _NODE_RANK, _MASTER_ADDR and _MASTER_PORT of ``cmd`` on ``node``."""
    nodes = cmd.nodes or (node,)
    # A single-node job's rendezvous never leaves the host: loopback works whatever the advertised address.
    master_addr = "127.0.0.1" if len(nodes) == 1 else cmd.master_addr or nodes[0]
    port = cmd.master_port or protocol.master_port(cmd.job_id, cmd.attempt)
    return {
        protocol.ENV_NODES: ",".join(nodes),
        protocol.ENV_NUM_NODES: str(len(nodes)),
        protocol.ENV_NODE_RANK: str(cmd.node_rank if cmd.nodes else 0),
        protocol.ENV_MASTER_ADDR: master_addr,
        protocol.ENV_MASTER_PORT: str(port),
    }
