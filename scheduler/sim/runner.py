"""Run named policies side by side on one workload and summarise each run.

This is the API behind the command line (and the portal's what-if page):
parse policy specs, build each policy, simulate, compute metrics, and turn a
run into the JSON object of the CLI contract.
"""

from __future__ import annotations

import inspect
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from scheduler.core.metrics import ClassMetrics, gpu_utilization, makespan, metrics_by_class
from scheduler.core.model import NodeCapacity
from scheduler.core.policy import Policy, make_policy
from scheduler.sim.engine import ProgressCallback, simulate
from scheduler.sim.eta import EtaOptions, EtaSample, eta_summary, sample_run
from scheduler.sim.fairness import DEFAULT_WINDOW, run_fairness
from scheduler.sim.policy_fit import idle_note
from scheduler.sim.records import SimConfig, SimResult
from scheduler.sim.reconfig_metrics import reconfiguration_summary
from scheduler.sim.workloads.types import Workload


@dataclass(frozen=True)
class PolicySpec:
    """A policy name with constructor parameters; ``label`` names the run."""

    name: str
    params: dict[str, object] = field(default_factory=dict)

    @property
    def label(self) -> str:
        if not self.params:
            return self.name
        inner = ",".join(f"{k}={_format_value(v)}" for k, v in sorted(self.params.items()))
        return f"{self.name}:{inner}"


def parse_policy_spec(text: str) -> PolicySpec:
    """``"fitgpp"`` or ``"fitgpp:max_preemptions=2,starvation_threshold=inf"``.

    Values are read as int, float (``inf`` allowed), ``true``/``false``/``none``,
    else kept as strings. Raises ``ValueError`` on a malformed spec.
    """
    name, _, rest = text.partition(":")
    name = name.strip()
    if not name:
        raise ValueError(f"empty policy name in {text!r}")
    params: dict[str, object] = {}
    if rest.strip():
        for item in rest.split(","):
            key, eq, value = item.partition("=")
            if not eq or not key.strip():
                raise ValueError(f"policy parameter must be KEY=VALUE, got {item!r} in {text!r}")
            params[key.strip()] = parse_value(value.strip())
    return PolicySpec(name, params)


def parse_value(text: str) -> object:
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered == "none":
        return None
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return text


def _format_value(v: object) -> str:
    if v is None or isinstance(v, bool):
        return str(v).lower()
    return "inf" if isinstance(v, float) and math.isinf(v) else str(v)


def build_policy(spec: PolicySpec, resume_overhead: float | None = None,
                 reconfigure_overhead: float | None = None) -> Policy:
    """Construct the policy; raises ``KeyError`` (unknown name) or ``TypeError``
    (bad parameter).

    Unless the spec sets them, two parameters are filled in for a policy that
    accepts them: ``explain=False`` (the simulator reads no Pend messages, and
    thousands per cycle cost time) and ``resume_overhead`` = the simulator's, so
    that a policy estimating preemption loss uses the overhead it will be charged.
    Likewise ``restart_time`` = the simulator's reconfiguration overhead.
    """
    probe = make_policy(spec.name, **spec.params)
    accepted = accepted_params(type(probe))
    extra: dict[str, object] = {}
    if "explain" in accepted and "explain" not in spec.params:
        extra["explain"] = False
    if resume_overhead is not None and "resume_overhead" in accepted and "resume_overhead" not in spec.params:
        extra["resume_overhead"] = resume_overhead
    if reconfigure_overhead is not None and "restart_time" in accepted and "restart_time" not in spec.params:
        extra["restart_time"] = reconfigure_overhead
    return make_policy(spec.name, **spec.params, **extra) if extra else probe


def accepted_params(cls: type) -> set[str]:
    """Keyword parameters a class's constructor accepts, following ``**params``
    forwarded to base classes."""
    names: set[str] = set()
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        try:
            params = inspect.signature(init).parameters.values()
        except (TypeError, ValueError):
            break
        names |= {p.name for p in params if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD) and p.name != "self"}
        if not any(p.kind is p.VAR_KEYWORD for p in params):
            break
    return names


def check_fits(workload: Workload, nodes: Sequence[NodeCapacity]) -> None:
    """Raise ``ValueError`` when the cluster is smaller than the largest job, or
    a job asks for no GPU (the policies place GPU jobs only)."""
    zero = next((j.spec.id for j in workload.jobs if j.spec.num_gpus < 1), None)
    if zero is not None:
        raise ValueError(f"job {zero!r} asks for 0 GPUs; the scheduler places GPU jobs only")
    total = sum(n.gpus for n in nodes)
    largest = workload.max_gpus
    if largest > total:
        raise ValueError(
            f"cluster has {total} GPUs, smaller than the largest job of the workload ({largest} GPUs)"
        )


@dataclass
class RunResult:
    """One policy's run: raw simulation plus the metrics of the CLI contract."""

    policy: str
    workload: Workload
    wall_seconds: float
    sim: SimResult
    classes: dict[str, ClassMetrics]
    makespan_seconds: float
    gpu_utilization: float
    fair_window: float = DEFAULT_WINDOW
    """Window of the fair-share attainment (seconds)."""
    shares: Mapping[str, float] | None = None
    """The run's configured shares (None: fair share off)."""
    eta_samples: list[EtaSample] | None = None
    """``--eta-sample``: the forecasts made during the run (None: not sampled)."""
    eta: EtaOptions | None = None
    """What ``--eta-sample`` asked (with ``--progress-reports`` and ``--progress-noise``); None: not sampled."""
    notes: tuple[str, ...] = ()
    """What the figures do not say by themselves (``policy_fit.idle_note``)."""

    @property
    def preemptions(self) -> int:
        return len(self.sim.preemptions)

    @property
    def workload_label(self) -> str:
        return " | ".join((self.workload.name, *self.workload.notes))

    def to_json(self) -> dict:
        """The object of the ``--json`` contract (issue 2, item 6), plus a
        ``reconfiguration`` object for a workload of reconfigurable jobs."""
        out = {
            "policy": self.policy,
            "workload": self.workload_label,
            "jobs": len(self.sim.outcomes),
            "wall_seconds": self.wall_seconds,
            "classes": {k: v.as_dict() for k, v in self.classes.items()},
            "preemptions": self.preemptions,
            "lost_gpu_seconds": self.sim.lost_gpu_seconds,
            "gpu_utilization": self.gpu_utilization,
            "makespan_seconds": self.makespan_seconds,
        }
        if self.notes:
            out["notes"] = list(self.notes)
        extra = reconfiguration_summary(self.workload, self.sim)
        if extra is not None:
            out["reconfiguration"] = extra
        if self.sim.attempts is not None:
            out.update(run_fairness(self.workload, self.sim, self.shares, self.fair_window))
        if self.eta_samples is not None:
            out["eta"] = {**eta_summary(self.eta_samples),
                          "progress_reports": self.eta.progress_share if self.eta else 0.0,
                          "progress_noise": self.eta.progress_noise if self.eta else 0.0}
        return out


def run_policy(
    spec: PolicySpec,
    workload: Workload,
    nodes: Sequence[NodeCapacity],
    config: SimConfig = SimConfig(),
    progress: ProgressCallback | None = None,
    policy: Policy | None = None,
    eta: EtaOptions | None = None,
) -> RunResult:
    """Simulate one policy (built from ``spec`` unless given) and summarise it.

    ``eta``: forecast start times at ``eta.sample`` seeded submissions during the run,
    each the median of ``eta.draws`` runs (``scheduler.sim.eta``); the forecasts add
    to ``wall_seconds``."""
    policy = policy if policy is not None else build_policy(spec, config.resume_overhead, config.reconfigure_overhead)
    # The attempt log feeds the per-tenant results and the fair-share attainment.
    config = replace(config, record_attempts=True)
    t0 = time.perf_counter()
    samples = None
    if eta is None:
        sim = simulate(policy, nodes, workload.jobs, config, progress)
    else:
        sim, samples = sample_run(policy, nodes, workload.jobs, config, eta.sample, eta.seed, draws=eta.draws,
                                  progress_share=eta.progress_share, progress_noise=eta.progress_noise)
    wall = time.perf_counter() - t0
    span = makespan(sim.outcomes)
    return RunResult(
        policy=spec.label,
        workload=workload,
        wall_seconds=wall,
        sim=sim,
        classes=metrics_by_class(sim.outcomes),
        makespan_seconds=span,
        gpu_utilization=gpu_utilization(sim.allocated_gpu_seconds, sim.total_gpus, span),
        shares=config.shares,
        eta_samples=samples,
        eta=eta,
    )


def run_all(
    specs: Sequence[PolicySpec],
    workload: Workload,
    nodes: Sequence[NodeCapacity],
    config: SimConfig = SimConfig(),
    progress_for: Callable[[str], ProgressCallback | None] | None = None,
    eta: EtaOptions | None = None,
) -> list[RunResult]:
    """Every policy on the identical workload and cluster, in the given order.

    All policies are built before the first run so that a bad name or
    parameter fails fast.
    """
    check_fits(workload, nodes)
    policies = [build_policy(s, config.resume_overhead, config.reconfigure_overhead) for s in specs]
    runs = [
        run_policy(s, workload, nodes, config, progress_for(s.label) if progress_for else None, policy=p,
                   eta=eta)
        for s, p in zip(specs, policies)
    ]
    for run, spec, policy in zip(runs, specs, policies):
        note = idle_note(policy, spec.label, workload)
        if note:
            run.notes = (*run.notes, note)
    return runs
