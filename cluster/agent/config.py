"""Command-line options and environment fallbacks of the node agent."""

from __future__ import annotations

import argparse
import os
import re
import socket
from dataclasses import dataclass
from pathlib import Path

from cluster.agent.logstream import LogLimits
from cluster.protocol import ENV_AGENT_TOKEN, REPORT_QUEUE, ProtocolError, check_address

DEFAULT_BROKER = "redis://127.0.0.1:6379/0"
ENV_CHECKPOINT_ROOT = "GPUSCHED_CHECKPOINT_ROOT"
# "1" turns single-user mode on like --single-user (for deployments that set the environment, not the argv).
ENV_SINGLE_USER = "GPUSCHED_SINGLE_USER"
_NODE_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")


@dataclass(frozen=True)
class AgentConfig:
    name: str
    gpus: str  # "auto" or a count, resolved by resources.discover
    broker: str
    workdir: Path
    checkpoint_root: Path
    heartbeat: float
    log_interval: float
    cpus: float | None
    mem_gb: float | None
    token: str
    kill_jobs_on_exit: bool
    report_queue: str
    log_level: str
    # Seconds without this agent (lease not renewed) or without a heartbeat through the broker, after which its jobs are gone.
    fence_after: float = 0.0
    # Where other nodes reach this one (multi-node jobs' master address); "": default_advertise_address().
    advertise_address: str = ""
    # Every job runs as the agent's own user, unconfined where there are no cgroups (a laptop; docs/agent.md).
    single_user: bool = False
    min_uid: int = 1000
    pids_max: int = 4096
    image_cache: Path | None = None
    # Names of the agent's own environment variables copied into every job's (never the private ones).
    pass_env: tuple[str, ...] = ()
    # Seconds between GPU telemetry reports (0: none); the simulated source's control file (virtual GPUs).
    telemetry_interval: float = 5.0
    simulated_gpus: Path | None = None
    # How much of each attempt's log is streamed to the portal (cluster/agent/logstream.py).
    log_limits: LogLimits = LogLimits()


def _size(name: str):
    """A parser of a byte count >= 1: digits, optionally followed by K, M or G (powers of 1024)."""
    units = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3}

    def parse(text: str) -> int:
        digits, unit = text.strip(), ""
        if digits[-1:].upper() in units:
            digits, unit = digits[:-1], digits[-1].upper()
        if not (digits.isascii() and digits.isdigit()) or int(digits) < 1:
            raise argparse.ArgumentTypeError(f"{name}: expected a size such as 4M or 65536, got {text!r}")
        return int(digits) * units[unit]

    return parse


def _positive(name: str):
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be a number, got {text!r}") from None
        if not value > 0:
            raise argparse.ArgumentTypeError(f"{name} must be > 0, got {text!r}")
        return value

    return parse


# A restart of the agent shorter than this never costs its jobs anything by default.
MIN_DEFAULT_FENCE = 10.0


def _non_negative(name: str):
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be a number, got {text!r}") from None
        if not value >= 0:
            raise argparse.ArgumentTypeError(f"{name} must be >= 0, got {text!r}")
        return value

    return parse


# A TEST-NET-1 address (RFC 5737): connecting a UDP socket to it sends nothing
# but makes the kernel pick the source address of the default route.
_ROUTE_PROBE = ("192.0.2.1", 9)


def default_advertise_address(node_name: str) -> str:
    """This host's address for other nodes when --advertise-address is not given.

    The fully qualified domain name when the host has one (a dotted name other
    than localhost), else the IP address of the interface of the default route,
    else ``node_name``.
    """
    fqdn = socket.getfqdn()
    if "." in fqdn and not fqdn.startswith("localhost") and not _is_ip(fqdn):
        return fqdn
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect(_ROUTE_PROBE)
            ip = probe.getsockname()[0]
    except OSError:  # no route at all
        return node_name
    return ip if ip and not ip.startswith("0.") else node_name


def _is_ip(text: str) -> bool:
    try:
        socket.inet_pton(socket.AF_INET6 if ":" in text else socket.AF_INET, text)
    except OSError:
        return False
    return True


def _address(text: str) -> str:
    try:
        return check_address(text, "--advertise-address")
    except ProtocolError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _node_name(text: str) -> str:
    if not _NODE_NAME_RE.fullmatch(text):
        raise argparse.ArgumentTypeError(f"--name {text!r}: use 1-63 characters of A-Z a-z 0-9 . _ - (not starting with . _ -)")
    return text


def _queue_name(text: str) -> str:
    if not _NODE_NAME_RE.fullmatch(text):
        raise argparse.ArgumentTypeError(f"--report-queue {text!r}: use 1-63 characters of A-Z a-z 0-9 . _ -")
    return text


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m cluster.agent",
        description="GPU node agent: runs the scheduler's jobs on this machine, talking only through the broker.",
    )
    p.add_argument("--name", required=True, type=_node_name, help="node name; commands arrive on queue node.<name>")
    p.add_argument("--gpus", required=True, help="'auto' (GPUs found through NVML) or N virtual GPUs")
    p.add_argument("--broker", help="broker URL (default: $CELERY_BROKER_URL, $REDIS_URL, then " + DEFAULT_BROKER + ")")
    p.add_argument("--workdir", type=Path, help="state, logs and job directories (default: var/agent/<name>)")
    p.add_argument(
        "--checkpoint-root",
        type=Path,
        help=f"CHECKPOINT_DIR = <this>/<job id> (default: ${ENV_CHECKPOINT_ROOT}, else <workdir>/checkpoints); "
        "share it between nodes so a job preempted on one node resumes on another",
    )
    p.add_argument("--heartbeat", type=_positive("--heartbeat"), default=5.0, help="seconds between heartbeats (default 5)")
    p.add_argument("--log-interval", type=_positive("--log-interval"), default=0.5, help="seconds between log batches (default 0.5)")
    p.add_argument("--cpus", type=_positive("--cpus"), help="CPUs to declare (default: detected)")
    p.add_argument("--mem-gb", type=_positive("--mem-gb"), help="memory in GB to declare (default: detected)")
    p.add_argument("--token", help=f"shared secret sent with every report (default: ${ENV_AGENT_TOKEN}; prefer the variable, "
                   "a command-line token is visible to other users in ps)")
    p.add_argument("--kill-jobs-on-exit", action="store_true",
                   help="on SIGTERM/SIGINT stop running jobs (SIGTERM, grace, SIGKILL) before exiting; "
                   "default: leave them running for the next agent on this work dir to adopt")
    p.add_argument("--report-queue", type=_queue_name, default=REPORT_QUEUE,
                   help=f"queue the reports go to (default {REPORT_QUEUE!r}, the portal workers' queue); "
                   "a deployment may route them to a dedicated queue and worker")
    p.add_argument("--advertise-address", type=_address, default="",
                   help="host name or IP at which the other nodes of a multi-node job reach this one; rank 0's becomes "
                        "the job's MASTER_ADDR (default: this host's fully qualified domain name, else the IP of the "
                        "default route's interface)")
    p.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    p.add_argument("--fence-after", type=_non_negative("--fence-after"),
                   help="seconds without this agent, or without a heartbeat reaching the broker, after which its jobs "
                        "are gone (SIGTERM first, within their grace period, then SIGKILL), so that a job the server "
                        "restarts elsewhere never runs twice (default: 2 x --heartbeat, at least 10; 0: never). Keep it below the "
                        "server's node-lost delay minus one heartbeat, AGENT_HEARTBEAT_SECONDS x (NODE_LOST_HEARTBEATS - 1)")
    p.add_argument("--single-user", action="store_true",
                   help=f"run every job as this agent's own user, ignoring run_as (also ${ENV_SINGLE_USER}=1); for a "
                        "laptop or a demo without root: jobs are then NOT isolated from each other or from the agent")
    p.add_argument("--min-uid", type=int, default=1000,
                   help="refuse to run jobs as a user below this uid (system accounts; default 1000); uid 0 is always refused")
    p.add_argument("--pids-max", type=int, default=4096, help="processes and threads one attempt may have (default 4096; 0: no limit)")
    p.add_argument("--pass-env", action="append", default=[], metavar="NAME",
                   help="copy this variable of the agent's environment into every job's (repeatable), e.g. a site's "
                        "proxy or BLAS settings; the token and broker URLs are never copied")
    p.add_argument("--telemetry-interval", type=_non_negative("--telemetry-interval"), default=5.0,
                   help="seconds between GPU telemetry reports (utilisation, memory, temperature, power, ECC, Xid; "
                        "default 5; 0: none)")
    p.add_argument("--simulated-gpus", type=Path,
                   help="control file of the simulated telemetry of virtual GPUs (--gpus N; default "
                        "<workdir>/simulated-gpus.json; docs/telemetry.md)")
    p.add_argument("--image-cache", type=Path, help="where images are unpacked (default: <workdir>/images)")
    p.add_argument("--log-max-lag", type=_size("--log-max-lag"), default=LogLimits().max_lag_bytes, metavar="SIZE",
                   help="unstreamed log beyond which the stream jumps to the newest lines, saying what it left out "
                        "(bytes, or with K, M or G; default 4M)")
    p.add_argument("--log-stream-limit", type=_size("--log-stream-limit"), default=LogLimits().stream_bytes,
                   metavar="SIZE", help="log streamed per attempt while it runs; beyond it only the end of the log, "
                                        "when the attempt ends (default 256M)")
    p.add_argument("--log-final", type=_size("--log-final"), default=LogLimits().final_bytes, metavar="SIZE",
                   help="the most of a log's unstreamed end sent when the attempt ends (default 1M)")
    return p


def parse_args(argv: list[str] | None = None, environ: dict[str, str] | None = None) -> AgentConfig:
    """Parse ``argv``; fill broker and token from ``environ`` (default os.environ)."""
    env = os.environ if environ is None else environ
    args = build_parser().parse_args(argv)
    workdir = (args.workdir or Path("var") / "agent" / args.name).resolve()
    return AgentConfig(
        name=args.name,
        gpus=args.gpus,
        broker=args.broker or env.get("CELERY_BROKER_URL") or env.get("REDIS_URL") or DEFAULT_BROKER,
        workdir=workdir,
        checkpoint_root=Path(args.checkpoint_root or env.get(ENV_CHECKPOINT_ROOT) or workdir / "checkpoints").resolve(),
        heartbeat=args.heartbeat,
        log_interval=args.log_interval,
        cpus=args.cpus,
        mem_gb=args.mem_gb,
        token=args.token if args.token is not None else env.get(ENV_AGENT_TOKEN, ""),
        kill_jobs_on_exit=args.kill_jobs_on_exit,
        report_queue=args.report_queue,
        log_level=args.log_level,
        fence_after=args.fence_after if args.fence_after is not None else max(2 * args.heartbeat, MIN_DEFAULT_FENCE),
        advertise_address=args.advertise_address,
        single_user=args.single_user or env.get(ENV_SINGLE_USER, "") == "1",
        min_uid=max(1, args.min_uid),
        pids_max=max(0, args.pids_max),
        image_cache=(args.image_cache or workdir / "images").resolve(),
        pass_env=tuple(dict.fromkeys(args.pass_env)),
        telemetry_interval=args.telemetry_interval,
        simulated_gpus=(args.simulated_gpus or workdir / "simulated-gpus.json").resolve(),
        log_limits=LogLimits(max_lag_bytes=args.log_max_lag, stream_bytes=args.log_stream_limit,
                             final_bytes=args.log_final),
    )
