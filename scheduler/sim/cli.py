"""``python -m scheduler.sim``: run policies side by side on one workload.

Contract (issue 2, item 6)::

    python -m scheduler.sim --policy NAME [--policy NAME ...]
        (--workload synthetic [--seed N] [--load X] [--te-share X]
         | --trace FILE [--trace-format canonical|philly|morphling|pollux])
        [--cluster NODESxGPUS] [--json FILE] [--report FILE.html]

A bad argument (negative load, unknown policy, cluster smaller than the
largest job, malformed trace row, ...) prints one line and exits with status 2.
"""

from __future__ import annotations

import argparse
import math
import re
import shlex
import sys
from collections.abc import Sequence

from scheduler.core.policy import policy_names
from scheduler.sim.cluster import make_nodes, parse_cluster
from scheduler.sim.records import SimConfig, SimulationError
from scheduler.sim.progress import ProgressBar
from scheduler.sim.morphling import TESTBED, load_morphling
from scheduler.sim.reconfig_metrics import is_reconfigurable_workload, reconfiguration_table
from scheduler.core.fairshare import DEFAULT_HALF_LIFE
from scheduler.sim.fairness import DEFAULT_WINDOW
from scheduler.sim.eta import DEFAULT_DRAWS, EtaOptions, waited_count
from scheduler.sim.progress_reports import check_noise, check_share
from scheduler.sim.shares import load_shares
from scheduler.sim.outputs import check_output_paths, write_outputs
from scheduler.sim.runner import PolicySpec, RunResult, parse_policy_spec, parse_value, run_all
from scheduler.sim.table import change_table, results_table
from scheduler.sim.workloads.canonical import TraceError, load_canonical
from scheduler.sim.workloads.philly import PhillyRule, load_philly
from scheduler.sim.workloads.pollux import NODE_GPUS as POLLUX_NODE_GPUS
from scheduler.sim.workloads.pollux import NODES as POLLUX_NODES
from scheduler.sim.workloads.pollux import load_pollux_adaptive, load_pollux_tuned
from scheduler.sim.workloads.synthetic import SyntheticConfig, generate
from scheduler.sim.workloads.types import Workload

PROG = "python -m scheduler.sim"
DEFAULT_CLUSTER = "16x8"


class UsageError(Exception):
    """A bad argument: reported in one line, exit status 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, status 2 (argparse prints usage too)
        raise UsageError(message)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog=PROG, description="Trace-driven scheduling simulator: policies side by side.")
    p.add_argument("--policy", action="append", required=True, metavar="NAME[:K=V,...]",
                   help="policy to run (repeatable); optional constructor parameters after a colon, "
                        "e.g. fitgpp:max_preemptions=2")
    p.add_argument("--param", action="append", default=[], metavar="POLICY.KEY=VALUE",
                   help="constructor parameter for every run of POLICY (repeatable)")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--workload", choices=["synthetic"], help="generate a synthetic workload")
    src.add_argument("--trace", metavar="FILE", help="replay a trace file")
    p.add_argument("--trace-format", choices=["canonical", "philly", "morphling", "pollux"], default=None,
                   help="trace file format (default canonical); morphling: the Rubick workloads, "
                        "reconfigurable jobs on the authors' 8x8 testbed unless --cluster/--node-* say otherwise; "
                        "pollux: a Pollux study workload as TunedJobs (GPUs and batch size of the trace) on the "
                        "study's 16x4 cluster unless --cluster says otherwise (the study restarts in 30 s: "
                        "--resume-overhead 30)")
    p.add_argument("--pollux-jobs", choices=["tuned", "trace-batch", "adaptive"], default=None,
                   help="pollux: plain TunedJobs (default; Tiresias), adaptive jobs keeping the trace's batch "
                        "(Optimus) or adaptive jobs at their goodput-optimal batch (Pollux); the adaptive ones "
                        "want --round-seconds 60")
    p.add_argument("--round-seconds", type=float, default=None,
                   help="decide only every this many seconds (the Pollux study: 60); default at every event")
    p.add_argument("--policy-times", choices=["measured", "model", "measured-only"], default=None,
                   help="morphling: iteration times the policies see (default measured, the model where not "
                        "measured; the simulator always replays measured times, the model where not measured)")
    p.add_argument("--seed", type=int, default=None, help="synthetic workload / Philly grace seed (default 0)")
    p.add_argument("--load", type=float, default=None, help="synthetic offered load (default 1.0)")
    p.add_argument("--te-share", type=float, default=None, help="synthetic fraction of TE jobs (default 0.3)")
    p.add_argument("--jobs", type=int, default=None, help="synthetic number of jobs (default 4000)")
    p.add_argument("--window", default=None, metavar="START:END",
                   help="Philly: only jobs submitted in [START, END) from the trace start, e.g. 14d:28d "
                        "(units s, m, h, d; none = seconds)")
    p.add_argument("--te-max-gpus", type=int, default=None, help="Philly rule: TE jobs use at most this many GPUs (2)")
    p.add_argument("--te-max-duration", type=float, default=None,
                   help="Philly rule: TE jobs run at most this many seconds (900)")
    p.add_argument("--cluster", default=None, metavar="NODESxGPUS", help=f"cluster shape (default {DEFAULT_CLUSTER})")
    p.add_argument("--node-cpus", type=float, default=None,
                   help="CPUs per node (0: CPUs do not limit jobs; default 0, morphling 96)")
    p.add_argument("--node-mem-gb", type=float, default=None,
                   help="memory per node (0: memory does not limit jobs; default 0, morphling 1600)")
    p.add_argument("--resume-overhead", type=float, default=SimConfig().resume_overhead,
                   help="seconds a preempted job spends restoring when it restarts (default %(default)s)")
    p.add_argument("--reconfigure-overhead", type=float, default=SimConfig().reconfigure_overhead,
                   help="seconds a reconfigured job spends relaunching after its checkpoint (default %(default)s)")
    p.add_argument("--fair-share", action="store_true",
                   help="fair share among tenants, equal shares (the policies order and reclaim by it)")
    p.add_argument("--shares", metavar="FILE",
                   help="fair share with the shares of a CSV file with the header tenant,share (implies --fair-share)")
    p.add_argument("--half-life", type=float, default=None,
                   help=f"fair-share usage half-life in seconds (default {DEFAULT_HALF_LIFE:g})")
    p.add_argument("--fair-window", type=float, default=DEFAULT_WINDOW,
                   help="window of the fair-share attainment in seconds (default %(default)g)")
    p.add_argument("--flood", default=None, metavar="TENANT:FACTOR",
                   help="synthetic: TENANT (t0, t1, ...) submits FACTOR times its normal number of jobs")
    p.add_argument("--tenants", type=int, default=None, help="synthetic: number of tenants (default 4)")
    p.add_argument("--jobs-csv", metavar="FILE",
                   help="write one row per attempt (policy, job_id, tenant, user, job_class, num_gpus, "
                        "submit_time, attempt, start_time, end_time, outcome)")
    p.add_argument("--eta-sample", type=int, default=None, metavar="K",
                   help="forecast the start of K jobs drawn at random at their submission, with only what was "
                        "known then, and compare with their actual start (JSON: eta)")
    p.add_argument("--eta-seed", type=int, default=0, help="seed of the --eta-sample draw (default 0)")
    p.add_argument("--eta-draws", type=int, default=DEFAULT_DRAWS, metavar="N",
                   help=f"with --eta-sample: each forecast is the median start over N runs with their own "
                        f"run-time draws (odd; default {DEFAULT_DRAWS}; 1: one run)")
    p.add_argument("--progress-reports", type=float, default=None, metavar="SHARE",
                   help="with --eta-sample: this share (0 to 1) of the jobs report their progress, and a "
                        "forecast takes a reporting running job's remaining time from its reports, as the "
                        "live cluster does (default 0: every remaining time from the history)")
    p.add_argument("--progress-noise", type=float, default=None, metavar="SIGMA",
                   help="with --progress-reports: each reporting job's rate is misread by a fixed factor "
                        "exp(SIGMA x z), z standard normal per job (default 0: exact rates)")
    p.add_argument("--eta-csv", metavar="FILE",
                   help="with --eta-sample: write each forecast (policy, job_id, job_class, submit_time, "
                        "forecast_start, actual_start)")
    p.add_argument("--json", metavar="FILE", help="write the results as JSON (one object per policy)")
    p.add_argument("--report", metavar="FILE.html", help="write a self-contained HTML report")
    p.add_argument("--no-progress", action="store_true", help="never draw the progress bar")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = build_parser().parse_args(argv)
        check_output_paths({"--json": args.json, "--jobs-csv": args.jobs_csv, "--eta-csv": args.eta_csv,
                            "--report": args.report})
        specs = _policy_specs(args)
        _cluster_defaults(args)
        workload = _workload(args)
        nodes_n, gpus = parse_cluster(args.cluster or DEFAULT_CLUSTER)
        _check(args.node_cpus >= 0 and args.node_mem_gb >= 0, "--node-cpus/--node-mem-gb must be >= 0")
        nodes = make_nodes(nodes_n, gpus, args.node_cpus, args.node_mem_gb)
        config = SimConfig(resume_overhead=args.resume_overhead, reconfigure_overhead=args.reconfigure_overhead,
                           round_seconds=args.round_seconds, **_fair_share(args))
        progress = None if args.no_progress else (lambda label: ProgressBar(label))
        runs = run_all(specs, workload, nodes, config, progress, eta=_eta(args))
        for run in runs:
            run.fair_window = args.fair_window
    except UsageError as e:
        return _fail(str(e), 2)
    except TraceError as e:
        return _fail(f"malformed trace: {e}", 2)
    except KeyError as e:
        return _fail(str(e.args[0]) if e.args else "unknown name", 2)
    except (ValueError, TypeError) as e:
        return _fail(str(e), 2)
    except SimulationError as e:
        return _fail(f"simulation failed (policy bug): {e}", 1)
    print(render(runs, nodes_n, gpus, config))
    try:
        write_outputs(runs, json_path=args.json, jobs_csv=args.jobs_csv, eta_csv=args.eta_csv, report=args.report,
                      command=f"{PROG} {shlex.join(argv)}")
    except OSError as e:
        return _fail(f"results not written: {e}", 1)
    return 0


def render(runs: list[RunResult], nodes: int, gpus: int, config: SimConfig) -> str:
    """The text printed after a run: workload, cluster, table, changes vs FIFO."""
    first = runs[0]
    lines = [f"workload: {first.workload.name}"]
    lines += [f"  {note}" for note in first.workload.notes]
    lines.append(f"cluster: {nodes}x{gpus} ({nodes * gpus} GPUs); resume overhead {config.resume_overhead:g} s")
    baseline = next((r for r in runs if r.policy == "fifo"), first)
    fifo_p95 = baseline.classes["TE"].slowdown["p95"]
    if baseline.policy == "fifo" and fifo_p95 is not None:
        lines.append(f"FIFO TE p95 slowdown: {fifo_p95:.1f}")
    lines += ["", results_table(runs)]
    if len(runs) > 1:
        lines += ["", change_table(runs, baseline)]
    notes = [f"note: {note}" for run in runs for note in run.notes]
    if notes:
        lines += ["", *notes]
    for run in runs:
        fair = run.to_json().get("fair_share")
        if fair and fair["tenant_windows"]:
            a = fair["attainment"]
            lines.append(f"{run.policy}: fair-share attainment over {fair['window_seconds'] / 3600:g} h windows: "
                         f"p10 {a['p10']:.3f}, median {a['median']:.3f} ({fair['tenant_windows']} tenant-windows)")
    for run in runs:
        if run.eta_samples is not None:
            lines.append(_eta_line(run))
    if config.shares is not None:
        lines.append(f"fair share on: {'shares file' if config.shares else 'equal shares'}, "
                     f"usage half-life {config.half_life:g} s")
    if is_reconfigurable_workload(first.workload):
        lines.append(f"reconfiguration overhead {config.reconfigure_overhead:g} s")
        lines += ["", reconfiguration_table(runs)]
    return "\n".join(lines)


def _fair_share(args: argparse.Namespace) -> dict:
    """SimConfig's fair-share fields from ``--fair-share``/``--shares``/``--half-life``."""
    _check(math.isfinite(args.fair_window) and args.fair_window > 0, "--fair-window must be a number of seconds > 0")
    on = args.fair_share or args.shares is not None
    if not on:
        _check(args.half_life is None, "--half-life applies only with --fair-share or --shares")
        return {}
    half_life = DEFAULT_HALF_LIFE if args.half_life is None else args.half_life
    _check(math.isfinite(half_life) and half_life > 0, f"--half-life must be a number of seconds > 0, got {half_life:g}")
    shares = load_shares(args.shares) if args.shares is not None else {}
    return {"shares": shares, "half_life": half_life}


def _eta(args: argparse.Namespace) -> EtaOptions | None:
    """``--eta-sample``/``--eta-seed``/``--eta-draws``/``--progress-reports``; None when not asked."""
    if args.eta_sample is None:
        _check(args.eta_csv is None, "--eta-csv applies only with --eta-sample")
        _check(args.progress_reports is None, "--progress-reports applies only with --eta-sample")
        _check(args.progress_noise is None, "--progress-noise applies only with --progress-reports")
        return None
    _check(args.eta_sample >= 1, f"--eta-sample must be >= 1, got {args.eta_sample}")
    _check(args.eta_draws >= 1 and args.eta_draws % 2 == 1, f"--eta-draws must be an odd number >= 1, got {args.eta_draws}")
    _check(args.progress_noise is None or args.progress_reports is not None,
           "--progress-noise applies only with --progress-reports")
    try:
        share = 0.0 if args.progress_reports is None else check_share(args.progress_reports)
        noise = 0.0 if args.progress_noise is None else check_noise(args.progress_noise)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    return EtaOptions(args.eta_sample, args.eta_seed, args.eta_draws, share, noise)


def _eta_line(run: RunResult) -> str:
    eta = run.to_json()["eta"]
    err = eta["abs_error_seconds"]
    waited = eta["within_25pct_waited"]
    return (f"{run.policy}: start-time forecasts: {eta['samples']} samples, |error| p50 {err['p50'] or 0:.0f} s, "
            f"p90 {err['p90'] or 0:.0f} s, within 25%/5 min {eta['within_25pct'] or 0:.3f}, of the "
            f"{waited_count(run.eta_samples or [])} that waited >= 10 min "
            + ("n/a" if waited is None else f"{waited:.3f}")
            + _reports_note(run))


def _reports_note(run: RunResult) -> str:
    asked = run.eta
    if asked is None or not asked.progress_share:
        return ""
    noise = f", rates misread by sigma {asked.progress_noise:g}" if asked.progress_noise else ""
    return f" (progress reports from {asked.progress_share:g} of the jobs{noise})"


def parse_flood(text: str) -> tuple[str, float]:
    """``"t0:4"`` -> ``("t0", 4.0)``."""
    tenant, colon, factor = text.rpartition(":")
    _check(bool(colon and tenant.strip()), f"--flood must be TENANT:FACTOR, got {text!r}")
    try:
        value = float(factor)
    except ValueError:
        raise UsageError(f"--flood factor must be a number >= 1, got {factor!r}") from None
    _check(math.isfinite(value) and value >= 1, f"--flood factor must be a number >= 1, got {factor!r}")
    return tenant.strip(), value


def _fail(message: str, status: int) -> int:
    print(f"{PROG}: error: {' '.join(message.split())}", file=sys.stderr)
    return status


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise UsageError(message)


def _policy_specs(args: argparse.Namespace) -> list[PolicySpec]:
    known = policy_names()
    specs = []
    for text in args.policy:
        try:
            spec = parse_policy_spec(text)
        except ValueError as e:
            raise UsageError(str(e)) from None
        _check(spec.name in known, f"unknown policy {spec.name!r}; known: {', '.join(known)}")
        specs.append(spec)
    for text in args.param:
        target, eq, value = text.partition("=")
        name, dot, key = target.rpartition(".")
        _check(bool(eq and dot and name and key), f"--param must be POLICY.KEY=VALUE, got {text!r}")
        _check(any(s.name == name for s in specs), f"--param {text!r} names no --policy given")
        specs = [
            PolicySpec(s.name, {**s.params, key: parse_value(value)}) if s.name == name and key not in s.params else s
            for s in specs
        ]
    return specs


def _cluster_defaults(args: argparse.Namespace) -> None:
    """The Rubick testbed for morphling traces, else no CPU/memory limits."""
    morphling = args.trace_format == "morphling"
    if morphling and args.cluster is None:
        args.cluster = f"{TESTBED[0]}x{TESTBED[1]}"
    if args.trace_format == "pollux" and args.cluster is None:
        args.cluster = f"{POLLUX_NODES}x{POLLUX_NODE_GPUS}"
    if args.node_cpus is None:
        args.node_cpus = TESTBED[2] if morphling else 0.0
    if args.node_mem_gb is None:
        args.node_mem_gb = TESTBED[3] if morphling else 0.0
    _check(morphling or args.policy_times is None, "--policy-times applies only to --trace-format morphling")
    _check(args.trace_format == "pollux" or args.pollux_jobs is None, "--pollux-jobs applies only to --trace-format pollux")


def _workload(args: argparse.Namespace) -> Workload:
    if args.workload == "synthetic":
        for flag in ("trace_format", "window", "te_max_gpus", "te_max_duration"):
            _check(getattr(args, flag) is None, f"--{flag.replace('_', '-')} applies only to --trace")
        nodes, gpus = parse_cluster(args.cluster or DEFAULT_CLUSTER)
        values = {"seed": args.seed, "load": args.load, "te_share": args.te_share, "jobs": args.jobs,
                  "tenants": args.tenants, "flood": parse_flood(args.flood) if args.flood else None}
        config = SyntheticConfig(nodes=nodes, gpus_per_node=gpus, **{k: v for k, v in values.items() if v is not None})
        return generate(config)
    for flag in ("load", "te_share", "jobs", "flood", "tenants"):
        _check(getattr(args, flag) is None, f"--{flag.replace('_', '-')} applies only to --workload synthetic")
    if (args.trace_format or "canonical") == "canonical":
        for flag in ("window", "te_max_gpus", "te_max_duration", "seed"):
            _check(getattr(args, flag) is None, f"--{flag.replace('_', '-')} applies only to --trace-format philly")
        return load_canonical(args.trace)
    if args.trace_format == "pollux":
        for flag in ("window", "te_max_gpus", "te_max_duration", "seed"):
            _check(getattr(args, flag) is None, f"--{flag.replace('_', '-')} applies only to --trace-format philly")
        if args.pollux_jobs in ("trace-batch", "adaptive"):
            return load_pollux_adaptive(args.trace, batch="trace" if args.pollux_jobs == "trace-batch" else "adaptive")
        return load_pollux_tuned(args.trace, node_gpus=parse_cluster(args.cluster)[1])
    if args.trace_format == "morphling":
        for flag in ("window", "te_max_gpus", "te_max_duration", "seed"):
            _check(getattr(args, flag) is None, f"--{flag.replace('_', '-')} applies only to --trace-format philly")
        nodes, gpus = parse_cluster(args.cluster)
        return load_morphling(args.trace, max_gpus=nodes * gpus, policy_times=args.policy_times or "measured",
                              node_gpus=gpus)
    defaults = PhillyRule()
    rule = PhillyRule(
        te_max_gpus=defaults.te_max_gpus if args.te_max_gpus is None else args.te_max_gpus,
        te_max_duration=defaults.te_max_duration if args.te_max_duration is None else args.te_max_duration,
        seed=args.seed or 0,
    )
    return load_philly(args.trace, rule, parse_window(args.window) if args.window else None)


_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_SPAN = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([smhd]?)\s*$")


def parse_window(text: str) -> tuple[float, float]:
    """``"14d:28d"`` -> seconds ``(1209600.0, 2419200.0)``."""
    start, colon, end = text.partition(":")
    _check(bool(colon), f"--window must be START:END, got {text!r}")
    bounds = []
    for part in (start, end):
        m = _SPAN.match(part)
        _check(m is not None, f"--window bound {part!r} is not a time like 14d, 36h, 90m or 3600")
        bounds.append(float(m.group(1)) * _UNITS[m.group(2)])
    _check(math.isfinite(bounds[1]) and bounds[0] < bounds[1], f"--window start must be before end, got {text!r}")
    return bounds[0], bounds[1]
