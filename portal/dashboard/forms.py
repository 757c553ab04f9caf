"""The simulation page's form: workload (synthetic or an uploaded canonical trace), cluster, policies.

An uploaded trace is validated with the simulator's own loader
(``scheduler.sim.workloads.parse_canonical``); a bad row is refused with its
line number, the column, what is wrong, and the text of that line.
"""

from __future__ import annotations

import io

from django import forms
from django.conf import settings

from portal.dashboard.models import WorkloadKind
from portal.dashboard.simulation import SimulationRequest

#: Largest cluster the page simulates (nodes x GPUs per node).
MAX_NODES = 512
MAX_GPUS_PER_NODE = 16
DEFAULT_POLICIES = ("fifo", "te-priority", "fitgpp")
#: Characters of a refused line quoted back in the error.
QUOTED_LINE_CHARS = 200


def policy_choices() -> list[tuple[str, str]]:
    from scheduler.core.policy import policy_names

    return [(name, name) for name in policy_names()]


class SimulationForm(forms.Form):
    workload = forms.ChoiceField(choices=WorkloadKind.choices, initial=WorkloadKind.SYNTHETIC,
                                 widget=forms.RadioSelect)
    policies = forms.MultipleChoiceField(choices=policy_choices, widget=forms.CheckboxSelectMultiple,
                                         initial=list(DEFAULT_POLICIES),
                                         help_text="Run side by side on the identical workload and cluster.")
    nodes = forms.IntegerField(min_value=1, max_value=MAX_NODES, initial=16, label="Nodes")
    gpus_per_node = forms.IntegerField(min_value=1, max_value=MAX_GPUS_PER_NODE, initial=8, label="GPUs per node")
    resume_overhead = forms.FloatField(min_value=0, max_value=3600, initial=60, label="Resume overhead (s)",
                                       help_text="Seconds a preempted job spends restoring its checkpoint.")
    seed = forms.IntegerField(min_value=0, max_value=2**31 - 1, initial=0, required=False)
    jobs = forms.IntegerField(min_value=1, initial=2000, required=False, label="Jobs")
    load = forms.FloatField(min_value=0.01, max_value=10, initial=1.0, required=False, label="Offered load",
                            help_text="Requested GPU-seconds over the cluster's capacity during the arrivals.")
    te_share = forms.FloatField(min_value=0, max_value=1, initial=0.3, required=False, label="TE share")
    trace = forms.FileField(required=False, label="Canonical trace (CSV)",
                            help_text="Header job_id,submit_time,duration,num_gpus,job_class[,grace_period,...].")

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        self.fields["jobs"].widget.attrs["max"] = settings.SIMULATION_MAX_JOBS

    def clean_jobs(self) -> int | None:
        jobs = self.cleaned_data.get("jobs")
        if jobs is not None and jobs > settings.SIMULATION_MAX_JOBS:
            raise forms.ValidationError(f"At most {settings.SIMULATION_MAX_JOBS} jobs.")
        return jobs

    def clean_trace(self):  # noqa: ANN201
        upload = self.cleaned_data.get("trace")
        if upload is None:
            return None
        limit = settings.SIMULATION_MAX_UPLOAD_BYTES
        if upload.size > limit:
            raise forms.ValidationError(f"The file has {upload.size} bytes; the limit is {limit} bytes.")
        raw = upload.read()
        try:
            text = raw.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            line = raw[: exc.start].count(b"\n") + 1
            raise forms.ValidationError(f"Line {line}: not UTF-8 text (byte {exc.start}).") from None
        return upload.name, text

    def clean(self) -> dict:
        data = super().clean()
        kind = data.get("workload")
        if kind == WorkloadKind.TRACE:
            self._clean_trace_workload(data)
        elif kind == WorkloadKind.SYNTHETIC:
            self._clean_synthetic(data)
        return data

    def _clean_synthetic(self, data: dict) -> None:
        for name in ("seed", "jobs", "load", "te_share"):
            if data.get(name) is None and name not in self.errors:
                self.add_error(name, "Required for a synthetic workload.")

    def _clean_trace_workload(self, data: dict) -> None:
        from scheduler.sim.cluster import make_nodes
        from scheduler.sim.runner import check_fits
        from scheduler.sim.workloads import TraceError, parse_canonical

        if "trace" in self.errors:
            return
        if not data.get("trace"):
            self.add_error("trace", "Choose a trace file to upload.")
            return
        name, text = data["trace"]
        try:
            workload = parse_canonical(io.StringIO(text, newline=""), source=name)
        except TraceError as exc:
            self.add_error("trace", trace_error_message(exc, text))
            return
        if not workload.jobs:
            self.add_error("trace", "The trace has a header but no job.")
            return
        if len(workload.jobs) > settings.SIMULATION_MAX_JOBS:
            self.add_error("trace", f"The trace has {len(workload.jobs)} jobs; the page simulates at most "
                                    f"{settings.SIMULATION_MAX_JOBS}.")
            return
        if data.get("nodes") and data.get("gpus_per_node"):
            try:
                check_fits(workload, make_nodes(data["nodes"], data["gpus_per_node"]))
            except ValueError as exc:
                field = "trace" if "0 GPUs" in str(exc) else "nodes"
                self.add_error(field, str(exc))

    def to_request(self) -> SimulationRequest:
        data = self.cleaned_data
        kind = data["workload"]
        request = SimulationRequest(
            policies=list(data["policies"]),
            nodes=data["nodes"],
            gpus_per_node=data["gpus_per_node"],
            resume_overhead=float(data["resume_overhead"]),
            workload_kind=kind,
        )
        if kind == WorkloadKind.SYNTHETIC:
            synthetic = {"seed": data["seed"], "jobs": data["jobs"], "load": data["load"], "te_share": data["te_share"]}
            return SimulationRequest(**{**request.__dict__, "synthetic": synthetic})
        name, text = data["trace"]
        return SimulationRequest(**{**request.__dict__, "trace_name": name[:200], "trace_text": text})


def trace_error_message(exc, text: str) -> str:  # noqa: ANN001 - a TraceError
    """``Line 4, column 'duration': must be > 0. The line: "j3,10,0,1,TE"``."""
    where = f"Line {exc.line}" + (f", column '{exc.column}'" if exc.column else "")
    message = f"{where}: {exc.message}."
    lines = text.splitlines()
    if 1 <= exc.line <= len(lines):
        quoted = lines[exc.line - 1]
        if len(quoted) > QUOTED_LINE_CHARS:
            quoted = quoted[:QUOTED_LINE_CHARS] + "…"
        message += f' The line: "{quoted}"'
    return message
