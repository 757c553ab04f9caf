"""The message contract between the scheduler service and the node agents.

Both sides import this module; it imports neither Django nor Celery. Messages
travel as Celery tasks over the broker (Redis):

* commands to an agent go to the queue ``node.<name>`` under the task names
  ``AGENT_*`` below and are consumed by that node's agent only;
* reports from agents go to the default queue under the task names
  ``REPORT_*`` and are handled by the portal's Celery workers.

Every command about a job names ``(job_id, attempt)``: an agent ignores a
command for an attempt it has already finished, and the server ignores a report
for an attempt that is not the job's current one, so a late or repeated message
is harmless.
"""

from __future__ import annotations

import math
import re
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

NODE_QUEUE_PREFIX = "node."
# Reports go to Celery's default queue; agents never consume it.
REPORT_QUEUE = "celery"

# Commands, server -> agent.
AGENT_LAUNCH = "agent.launch"  # kwargs: LaunchCommand fields
AGENT_PREEMPT = "agent.preempt"  # kwargs: job_id, attempt, grace_period
AGENT_KILL = "agent.kill"  # kwargs: job_id, attempt, grace_period, reason (cancel, timeout, stale)
AGENT_RECONCILE = "agent.reconcile"  # kwargs: keep=[[job_id, attempt], ...]; kill everything else
AGENT_REGISTER_AGAIN = "agent.register-again"  # no kwargs: the server does not know the node; send REPORT_REGISTER

# Reports, agent -> server.
REPORT_REGISTER = "cluster.register"  # kwargs: node, gpus, cpus, mem_gb, gpu_models, signature, agent_version, address
REPORT_HEARTBEAT = "cluster.heartbeat"  # kwargs: node, running=[[job_id, attempt], ...], sent_at, signature, exited (recent_exits.py)
REPORT_STARTED = "cluster.started"  # kwargs: node, job_id, attempt, pid, started_at, signature
REPORT_EXITED = "cluster.exited"  # kwargs: node, job_id, attempt, exit_code, signal, ended_at, notice_at, checkpointed, signature, reason,
#                                   message, peak_mem_bytes, cpu_seconds
REPORT_LOG = "cluster.log"  # kwargs: node, job_id, attempt, lines=[str, ...], signature
REPORT_PROGRESS = "cluster.progress"  # kwargs: node, job_id, attempt, signature, cluster/progress_schema.py's fields
REPORT_TELEMETRY = "cluster.telemetry"  # kwargs: node, signature, sampled_at, gpus, jobs: cluster/telemetry_schema.py
# Times in reports (sent_at, started_at, ended_at, notice_at) are Unix epoch
# seconds as floats. exit_code is None when the process died from a signal;
# signal is None when it exited by itself. signature and signed_at: the report
# signed with the node's token (cluster/message_signing.py; an agent older than
# that sends token instead, "" when none is configured). agent_version, reason and address were added
# after the first version of this contract, so a receiver must tolerate their
# absence (a register without an address: other nodes reach it by its name).
# REPORT_EXITED's message (str, "" when none), peak_mem_bytes (int) and
# cpu_seconds (float) came later still: the latter two are None when the node
# could not measure them (no cgroup for the attempt).

PROTOCOL_VERSION = 2  # of every command and report (kwarg protocol_version): cluster/protocol_versions.py
# REPORT_EXITED ``reason``: why the attempt ended. None: the job exited without
# any signal from the agent. Otherwise the agent had signalled it because of:
EXIT_PREEMPT = "preempt"  # AGENT_PREEMPT
EXIT_CANCEL = "cancel"  # AGENT_KILL reason=cancel
EXIT_TIMEOUT = "timeout"  # the launch's time_limit ran out (enforced by the agent)
EXIT_STALE = "stale"  # AGENT_RECONCILE without this attempt in keep, or AGENT_KILL reason=stale
EXIT_LOST = "lost"  # the agent could not observe how the attempt ended (see docs/agent.md)
EXIT_AGENT_STOP = "agent-stop"  # the agent was stopped with --kill-jobs-on-exit
EXIT_LAUNCH_FAILED = "launch-failed"  # never started (bad GPU index, unusable work dir, bad run_as); see its log lines
EXIT_OUT_OF_MEMORY = "out-of-memory"  # the attempt went past its mem_bytes: the kernel's OOM killer ended it
EXIT_IMAGE_UNAVAILABLE = "image-unavailable"  # the launch's image could not be fetched, verified or unpacked; see message

# Environment given to every job process.
ENV_JOB_ID = "GPUSCHED_JOB_ID"
ENV_ATTEMPT = "GPUSCHED_ATTEMPT"
ENV_CHECKPOINT_DIR = "CHECKPOINT_DIR"
ENV_RESUME = "RESUME"
ENV_GRACE_PERIOD = "GRACE_PERIOD"
ENV_PROGRESS_FILE = "GPUSCHED_PROGRESS_FILE"  # where gpusched.job appends the job's progress reports
ENV_VISIBLE_DEVICES = "CUDA_VISIBLE_DEVICES"
# Given when the launch names a plan (reconfigurable training jobs, docs/agent.md):
ENV_PLAN = "GPUSCHED_PLAN"  # execution plan of this attempt (ga, zero-dp, "244", ...)
ENV_NUM_GPUS = "GPUSCHED_NUM_GPUS"  # GPUs of this attempt on all its nodes together
ENV_GRAD_ACCUM_STEPS = "GPUSCHED_GRAD_ACCUM_STEPS"  # micro-batches per step keeping the global batch
ENV_REQUESTED_GPUS = "GPUSCHED_REQUESTED_GPUS"  # GPUs of the request, for which the global batch is declared
# Given to every job, single-node ones too (docs/agent.md): what a distributed launcher needs.
ENV_NODES = "GPUSCHED_NODES"  # node names of the attempt in rank order, comma-separated
ENV_NUM_NODES = "GPUSCHED_NUM_NODES"
ENV_NODE_RANK = "GPUSCHED_NODE_RANK"  # 0 .. NUM_NODES-1, this node's place in GPUSCHED_NODES
ENV_MASTER_ADDR = "GPUSCHED_MASTER_ADDR"  # the advertised address of rank 0's node
ENV_MASTER_PORT = "GPUSCHED_MASTER_PORT"  # a rendezvous port, see master_port()
# The names torchrun and torch.distributed read, set from the above unless the
# launch's env already sets them.
LAUNCHER_ALIASES = {"MASTER_ADDR": ENV_MASTER_ADDR, "MASTER_PORT": ENV_MASTER_PORT, "NNODES": ENV_NUM_NODES,
                    "NODE_RANK": ENV_NODE_RANK}
# The rendezvous port range: MASTER_PORT_BASE .. MASTER_PORT_BASE + MASTER_PORT_SPAN - 1, one block per GPU
# index of the rank-0 node when the server gives the first GPU (up to MASTER_PORT_GPU_BLOCKS).
MASTER_PORT_BASE, MASTER_PORT_SPAN, MASTER_PORT_GPU_BLOCKS = 29500, 1000, 16
# A job may create this file in CHECKPOINT_DIR to say "my checkpoint is complete".
CHECKPOINT_MARKER = ".checkpoint-complete"
# The agent's shared secret, read by the agent and never passed on to jobs.
ENV_AGENT_TOKEN = "GPUSCHED_AGENT_TOKEN"

# Job ids double as directory names on the node, hence the restricted alphabet.
_JOB_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# POSIX portable user names (useradd's default rule), as resolved through NSS on the node.
_USER_NAME_RE = re.compile(r"^[a-z_][a-z0-9_.-]{0,31}$")
_IMAGE_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,199}$")
_DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")


def master_port(job_id: str | int, attempt: int, first_gpu: int | None = None) -> int:
    """The rendezvous port of ``attempt`` of ``job_id``: the same on every node of the attempt.

    With ``first_gpu``, the lowest GPU index the attempt holds on its rank-0 node (the server gives it):
    ``29500 + first_gpu * 62 + (job_id * 7 + attempt) % 62``. Jobs running at once on a node hold
    different GPUs, so their ports differ (by job alone, two of eight jobs on a node collided one time
    in 36). The port moves with the attempt, so a relaunch does not wait for TIME_WAIT. Without
    ``first_gpu`` (an agent driven by hand): ``29500 + (job_id * 7 + attempt) % 1000``; a string id is
    hashed with CRC-32 first."""
    key = job_id if isinstance(job_id, int) else zlib.crc32(str(job_id).encode())
    if first_gpu is None:
        return MASTER_PORT_BASE + (key * 7 + attempt) % MASTER_PORT_SPAN
    block = MASTER_PORT_SPAN // MASTER_PORT_GPU_BLOCKS
    return MASTER_PORT_BASE + (first_gpu % MASTER_PORT_GPU_BLOCKS) * block + (key * 7 + attempt) % block


class ProtocolError(ValueError):
    """A message field is missing or malformed; ``field`` names it."""

    def __init__(self, field_name: str, problem: str) -> None:
        super().__init__(f"{field_name}: {problem}")
        self.field = field_name


def check_job_id(value: Any, field_name: str = "job_id") -> str | int:
    """Return ``value`` if it is a valid job id (a non-negative int or a safe name)."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ProtocolError(field_name, f"must be a string or an integer, got {type(value).__name__}")
    if isinstance(value, int):
        if value < 0:
            raise ProtocolError(field_name, "must not be negative")
        return value
    if not _JOB_ID_RE.fullmatch(value):
        raise ProtocolError(field_name, f"{value!r} must be 1-128 characters of A-Z a-z 0-9 . _ - (not starting with . _ -)")
    return value


def check_attempt(value: Any, field_name: str = "attempt") -> int:
    """Return ``value`` if it is a valid attempt number (an int >= 0)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ProtocolError(field_name, f"must be an integer >= 0, got {value!r}")
    return value


def check_seconds(value: Any, field_name: str, *, allow_none: bool = False, positive: bool = False) -> float | None:
    """Return ``value`` as float seconds (>= 0, or > 0 when ``positive``)."""
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ProtocolError(field_name, f"must be a finite number of seconds, got {value!r}")
    if value < 0 or (positive and value == 0):
        raise ProtocolError(field_name, f"must be {'> 0' if positive else '>= 0'}, got {value!r}")
    return float(value)


def check_keep(value: Any) -> set[tuple[str | int, int]]:
    """Parse AGENT_RECONCILE's ``keep=[[job_id, attempt], ...]``."""
    if not isinstance(value, (list, tuple)):
        raise ProtocolError("keep", f"must be a list of [job_id, attempt], got {type(value).__name__}")
    keep: set[tuple[str | int, int]] = set()
    for i, item in enumerate(value):
        if not isinstance(item, (list, tuple)) or len(item) != 2:
            raise ProtocolError(f"keep[{i}]", f"must be [job_id, attempt], got {item!r}")
        keep.add((check_job_id(item[0], f"keep[{i}][0]"), check_attempt(item[1], f"keep[{i}][1]")))
    return keep


@dataclass(frozen=True)
class LaunchCommand:
    """AGENT_LAUNCH kwargs: run ``command`` as attempt ``attempt`` of ``job_id``.

    ``gpu_indices`` are the node-local GPU indices given to the job as
    CUDA_VISIBLE_DEVICES; ``grace_period`` is the seconds between SIGTERM and
    SIGKILL when the attempt is stopped; ``time_limit`` (None: none) is the
    seconds this attempt may run before the agent stops it (reason "timeout");
    ``env`` holds extra environment variables (the agent's own variables above
    override them); ``resume`` sets RESUME=1. ``plan`` (empty: none),
    ``num_gpus`` (all nodes together; 0: not given), ``grad_accum_steps`` and
    ``requested_gpus`` describe a reconfigurable job's allocation and become
    GPUSCHED_PLAN and friends when ``plan`` is set. ``nodes`` are the names of
    every node of the attempt in rank order (the server sorts them by name),
    ``node_rank`` is this node's index in it, and ``master_addr`` and
    ``master_port`` are where rank 0 listens for the rendezvous; they become
    GPUSCHED_NODES and friends. A launch without ``nodes`` (a server older than
    these fields) runs as a single-node job whose master is the receiving node.

    Confinement (docs/agent.md): ``run_as`` is the POSIX user name the job runs
    as, resolved on the node through NSS ("": the agent's own user, which an
    agent refuses unless it runs in single-user mode); ``cpus`` and
    ``mem_bytes`` are the attempt's limits (0: none); ``image`` names the root
    filesystem to run in ("": the host's), ``image_uri`` is its tarball's path
    and ``image_digest`` its "sha256:<hex>", both required with an image.
    Unknown keys in a received message are ignored so the server can add fields
    before every agent knows them.
    """

    job_id: str | int
    attempt: int
    command: str
    gpu_indices: tuple[int, ...] = ()
    grace_period: float = 0.0
    time_limit: float | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    resume: bool = False
    plan: str = ""
    num_gpus: int = 0
    grad_accum_steps: int = 1
    requested_gpus: int = 0
    nodes: tuple[str, ...] = ()
    node_rank: int = 0
    master_addr: str = ""
    master_port: int = 0
    run_as: str = ""
    cpus: float = 0.0
    mem_bytes: int = 0
    image: str = ""
    image_uri: str = ""
    image_digest: str = ""

    def to_kwargs(self) -> dict[str, Any]:
        """The JSON-ready kwargs for ``send_task(AGENT_LAUNCH, kwargs=...)``."""
        return {
            "job_id": self.job_id,
            "attempt": self.attempt,
            "command": self.command,
            "gpu_indices": list(self.gpu_indices),
            "grace_period": self.grace_period,
            "time_limit": self.time_limit,
            "env": dict(self.env),
            "resume": self.resume,
            "plan": self.plan,
            "num_gpus": self.num_gpus,
            "grad_accum_steps": self.grad_accum_steps,
            "requested_gpus": self.requested_gpus,
            "nodes": list(self.nodes),
            "node_rank": self.node_rank,
            "master_addr": self.master_addr,
            "master_port": self.master_port,
            "run_as": self.run_as,
            "cpus": self.cpus,
            "mem_bytes": self.mem_bytes,
            "image": self.image,
            "image_uri": self.image_uri,
            "image_digest": self.image_digest,
        }

    @classmethod
    def from_kwargs(cls, kwargs: Mapping[str, Any]) -> "LaunchCommand":
        """Validate received kwargs; raise ProtocolError naming the bad field."""
        for name in ("job_id", "attempt", "command"):
            if name not in kwargs:
                raise ProtocolError(name, "is required")
        command = kwargs["command"]
        if not isinstance(command, str) or not command.strip():
            raise ProtocolError("command", "must be a non-empty string")
        if "\x00" in command:
            raise ProtocolError("command", "must not contain NUL characters")
        resume = kwargs.get("resume", False)
        if not isinstance(resume, bool):
            raise ProtocolError("resume", f"must be true or false, got {resume!r}")
        nodes = _check_nodes(kwargs.get("nodes") or [])
        node_rank = _check_count(kwargs.get("node_rank", 0), "node_rank", 0)
        if nodes and node_rank >= len(nodes):
            raise ProtocolError("node_rank", f"must be below the {len(nodes)} nodes, got {node_rank}")
        master_port = _check_count(kwargs.get("master_port", 0), "master_port", 0)
        if master_port > 65535:
            raise ProtocolError("master_port", f"must be a TCP port (0: not given), got {master_port}")
        return cls(
            job_id=check_job_id(kwargs["job_id"]),
            attempt=check_attempt(kwargs["attempt"]),
            command=command,
            gpu_indices=_check_gpu_indices(kwargs.get("gpu_indices", [])),
            grace_period=check_seconds(kwargs.get("grace_period", 0.0), "grace_period"),
            time_limit=check_seconds(kwargs.get("time_limit"), "time_limit", allow_none=True, positive=True),
            env=_check_env(kwargs.get("env") or {}),
            resume=resume,
            plan=_check_plan(kwargs.get("plan") or ""),
            num_gpus=_check_count(kwargs.get("num_gpus", 0), "num_gpus", 0),
            grad_accum_steps=_check_count(kwargs.get("grad_accum_steps", 1), "grad_accum_steps", 1),
            requested_gpus=_check_count(kwargs.get("requested_gpus", 0), "requested_gpus", 0),
            nodes=nodes,
            node_rank=node_rank,
            master_addr=check_address(kwargs.get("master_addr") or "", "master_addr"),
            master_port=master_port,
            run_as=_check_user(kwargs.get("run_as") or ""),
            cpus=_check_cpus(kwargs.get("cpus") or 0.0),
            mem_bytes=_check_count(kwargs.get("mem_bytes") or 0, "mem_bytes", 0),
            **_check_image(kwargs),
        )


_PLAN_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9+_-]{0,31}$")


def _check_plan(value: Any) -> str:
    if not isinstance(value, str) or (value and not _PLAN_RE.fullmatch(value)):
        raise ProtocolError("plan", f"must be 1-32 characters of A-Z a-z 0-9 + _ -, got {value!r}")
    return value


def _check_user(value: Any) -> str:
    if not isinstance(value, str) or (value and not _USER_NAME_RE.fullmatch(value)):
        raise ProtocolError("run_as", f"must be a POSIX user name (1-32 characters of a-z 0-9 _ . -, "
                                      f"starting with a-z or _), got {value!r}")
    return value


def _check_cpus(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ProtocolError("cpus", f"must be a number of CPUs >= 0 (0: no limit), got {value!r}")
    return float(value)


def _check_image(kwargs: Mapping[str, Any]) -> dict[str, str]:
    """image, image_uri and image_digest: all empty, or a name, an absolute tarball path and its sha256."""
    image, uri, digest = (kwargs.get(name) or "" for name in ("image", "image_uri", "image_digest"))
    if not isinstance(image, str) or (image and not _IMAGE_NAME_RE.fullmatch(image)):
        raise ProtocolError("image", f"must be an image name (1-200 characters of A-Z a-z 0-9 . _ : / @ + -), got {image!r}")
    if not isinstance(uri, str) or "\x00" in uri or (uri and not uri.startswith("/")):
        raise ProtocolError("image_uri", f"must be an absolute path to a root filesystem tarball, got {uri!r}")
    if not isinstance(digest, str) or (digest and not _DIGEST_RE.fullmatch(digest)):
        raise ProtocolError("image_digest", f"must be 'sha256:' and 64 lowercase hex digits, got {digest!r}")
    if image and not uri:
        raise ProtocolError("image_uri", f"is required with image {image!r}")
    if uri and not digest:
        raise ProtocolError("image_digest", "is required with image_uri (the node verifies what it unpacks)")
    if uri and not image:
        raise ProtocolError("image", "is required with image_uri")
    return {"image": image, "image_uri": uri, "image_digest": digest}


def _check_count(value: Any, field_name: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ProtocolError(field_name, f"must be an integer >= {minimum}, got {value!r}")
    return value


# A host name or an IPv4/IPv6 literal: no spaces, commas or shell metacharacters.
_ADDRESS_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:%-]{0,252}$")
_NODE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")


def check_address(value: Any, field_name: str = "address") -> str:
    """Return ``value`` if it is empty or a host name / IP literal another node could connect to."""
    if not isinstance(value, str) or (value and not _ADDRESS_RE.fullmatch(value)):
        raise ProtocolError(field_name, f"must be a host name or an IP address (1-253 characters of "
                                        f"A-Z a-z 0-9 . _ : % -), got {value!r}")
    return value


def _check_nodes(value: Any) -> tuple[str, ...]:
    if not isinstance(value, (list, tuple)):
        raise ProtocolError("nodes", f"must be a list of node names, got {type(value).__name__}")
    for i, name in enumerate(value):
        if not isinstance(name, str) or not _NODE_RE.fullmatch(name):
            raise ProtocolError(f"nodes[{i}]", f"must be a node name, got {name!r}")
    if len(set(value)) != len(value):
        raise ProtocolError("nodes", f"must not repeat a node, got {list(value)!r}")
    return tuple(value)


def _check_gpu_indices(value: Any) -> tuple[int, ...]:
    if not isinstance(value, (list, tuple)):
        raise ProtocolError("gpu_indices", f"must be a list of integers, got {type(value).__name__}")
    for i, idx in enumerate(value):
        if isinstance(idx, bool) or not isinstance(idx, int) or idx < 0:
            raise ProtocolError(f"gpu_indices[{i}]", f"must be an integer >= 0, got {idx!r}")
    if len(set(value)) != len(value):
        raise ProtocolError("gpu_indices", f"must not repeat an index, got {list(value)!r}")
    return tuple(value)


def _check_env(value: Any) -> dict[str, str]:
    if not isinstance(value, Mapping):
        raise ProtocolError("env", f"must be an object of string values, got {type(value).__name__}")
    env: dict[str, str] = {}
    for key, val in value.items():
        if not isinstance(key, str) or not _ENV_NAME_RE.fullmatch(key):
            raise ProtocolError("env", f"{key!r} is not a valid environment variable name")
        if not isinstance(val, str) or "\x00" in val:
            raise ProtocolError(f"env[{key}]", f"must be a string without NUL, got {val!r}")
        env[key] = val
    return env


def node_queue(node_name: str) -> str:
    """The broker queue that carries commands to ``node_name``'s agent."""
    return f"{NODE_QUEUE_PREFIX}{node_name}"
