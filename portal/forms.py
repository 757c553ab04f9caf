"""Browser forms. Types and bounds are parsed here; the rules are the services' (shared with the API)."""

from __future__ import annotations

from django import forms

from scheduler.models import (
    DEFAULT_GRACE_PERIOD_S,
    MAX_COMMAND_LENGTH,
    MAX_CPUS_PER_JOB,
    MAX_GPUS_PER_JOB,
    MAX_GRACE_PERIOD_S,
    MAX_MEM_GB_PER_JOB,
    MAX_NAME_LENGTH,
    MAX_TIME_LIMIT_S,
    LIVE_STATES,
    PRIORITY_RANGE,
    TERMINAL_STATES,
    JobClassChoice,
    JobState,
)
from scheduler.core.perf.catalog import model_names
from interactive.models import SessionKind
from portal.cli.units import format_duration, parse_duration
from scheduler.selectors import enabled_image_names
from scheduler.services import JobRequest
from scheduler.usage import parse_instant

#: Which form field shows a quota refusal for each limit (others show above the form).
QUOTA_LIMIT_FIELD = {
    "max_gpus": "num_gpus",
    "max_te_gpus": "num_gpus",
    "max_te_job_gpus": "num_gpus",
    "max_te_runtime": "time_limit",
}


class DurationField(forms.Field):
    """Seconds, typed as the command line takes them (``portal.cli.units.parse_duration``): ``90``,
    ``90s``, ``30m``, ``2h``, ``1d``, ``1h30m`` or Slurm's ``MM:SS``, ``HH:MM:SS``, ``D-HH:MM:SS``;
    empty is None. Out of ``min_value..max_value`` (seconds) is an error naming both forms."""

    widget = forms.TextInput

    def __init__(self, *, min_value: int, max_value: int, **kwargs) -> None:  # noqa: ANN003
        self.min_value, self.max_value = min_value, max_value
        super().__init__(**kwargs)

    def widget_attrs(self, widget: forms.Widget) -> dict[str, str]:
        return {**super().widget_attrs(widget), "maxlength": "32", "placeholder": "90, 30m, 2h or 1-00:00:00",
                "autocomplete": "off", "spellcheck": "false"}

    def to_python(self, value: object) -> int | None:
        text = str(value).strip() if value is not None else ""
        if not text:
            return None
        if len(text) > 32:
            raise forms.ValidationError("Ensure this value has at most 32 characters.")
        try:
            seconds = parse_duration(text)
        except ValueError as exc:
            message = str(exc)
            raise forms.ValidationError(message[:1].upper() + message[1:]) from None
        for bound, beyond, word in ((self.min_value, seconds < self.min_value, "at least"),
                                    (self.max_value, seconds > self.max_value, "at most")):
            if beyond:
                raise forms.ValidationError(f"Ensure this value is {word} {format_duration(bound)} ({bound} s).")
        return seconds


class JobForm(forms.Form):
    name = forms.CharField(max_length=MAX_NAME_LENGTH)
    command = forms.CharField(
        max_length=MAX_COMMAND_LENGTH, strip=False, widget=forms.Textarea(attrs={"rows": 4, "spellcheck": "false"})
    )
    job_class = forms.ChoiceField(
        choices=JobClassChoice.choices, initial=JobClassChoice.BE, label="Class",
        help_text="TE jobs start fast and are not preempted; BE jobs may be preempted and resumed.",
    )
    num_gpus = forms.IntegerField(min_value=1, max_value=MAX_GPUS_PER_JOB, initial=1, label="GPUs")
    num_cpus = forms.FloatField(min_value=0, max_value=MAX_CPUS_PER_JOB, initial=0, required=False, label="CPUs")
    mem_gb = forms.FloatField(min_value=0, max_value=MAX_MEM_GB_PER_JOB, initial=0, required=False,
                              label="Memory (GB)")
    grace_period = DurationField(
        min_value=0, max_value=MAX_GRACE_PERIOD_S, initial=DEFAULT_GRACE_PERIOD_S, required=False,
        label="Grace period", help_text="Time to checkpoint between the preemption notice and the kill: "
                                        "seconds (90), 5m, or MM:SS.",
    )
    time_limit = DurationField(min_value=1, max_value=MAX_TIME_LIMIT_S, required=False, label="Time limit",
                               help_text="Seconds, or 90m, 2h, 1d, HH:MM:SS, D-HH:MM:SS. Empty: no limit (TE jobs "
                                         "get the quota's).")
    priority = forms.IntegerField(min_value=PRIORITY_RANGE[0], max_value=PRIORITY_RANGE[1], initial=0,
                                  required=False)
    # Reconfigurable training jobs (the rules: scheduler.elastic.clean_request).
    model = forms.ChoiceField(choices=[("", "none"), *((m, m) for m in model_names())], required=False,
                              help_text="A model the performance model knows: the scheduler may then change the plan "
                                        "and GPU count.")
    plan = forms.CharField(max_length=32, required=False, help_text="ga, gc, zero-dp, zero-offload (+gc), or pp tp dp "
                                                                    "digits like 244.")
    allowed_plans = forms.CharField(max_length=200, required=False, label="Allowed plans",
                                    help_text="Comma-separated plans the scheduler may switch to.")
    min_gpus = forms.IntegerField(min_value=1, max_value=MAX_GPUS_PER_JOB, required=False, label="Min GPUs")
    max_gpus = forms.IntegerField(min_value=1, max_value=MAX_GPUS_PER_JOB, required=False, label="Max GPUs")
    guaranteed = forms.BooleanField(required=False, help_text="Never run below the requested throughput.")
    adaptive_app = forms.CharField(max_length=32, required=False, label="Adaptive profile",
                                   help_text="An adaptive job's profile (cifar10, bert, ...): the scheduler may then "
                                             "change its GPUs (up to Max GPUs) and its batch size.")
    image = forms.ChoiceField(required=False, help_text="A root filesystem registered by an administrator to run in; "
                                                        "none: the node's own.")
    project = forms.CharField(max_length=64, required=False,
                              help_text="The project to charge, one you are a member of; empty: your default.")
    dependency = forms.CharField(max_length=1000, required=False,
                                 help_text="Wait for other jobs: afterok:12:13, afterany:14 or afternotok:15, "
                                           "comma-joined.")

    def __init__(self, *args, projects: list[str] | None = None, **kwargs) -> None:  # noqa: ANN002, ANN003
        super().__init__(*args, **kwargs)
        # Offered: the enabled images now; the service checks the name again when the job is submitted.
        self.fields["image"].choices = [("", "none"), *((n, n) for n in enabled_image_names())]
        # The projects offered are the user's; the service checks membership again (the field is free text so
        # that a refusal names the field rather than the choice list).
        self.fields["project"].widget = forms.TextInput(attrs={"list": "project-names"})
        self.project_names = projects or []

    def clean_command(self) -> str:
        command = self.cleaned_data["command"]
        if not command.strip():
            raise forms.ValidationError("This field may not be blank.")
        return command

    def to_request(self) -> JobRequest:
        data = self.cleaned_data

        def given(name: str, default):  # noqa: ANN001, ANN202
            return default if data.get(name) is None else data[name]

        return JobRequest(
            name=data["name"],
            command=data["command"],
            job_class=data["job_class"],
            num_gpus=data["num_gpus"],
            num_cpus=given("num_cpus", 0.0),
            mem_gb=given("mem_gb", 0.0),
            grace_period=given("grace_period", DEFAULT_GRACE_PERIOD_S),
            time_limit=data.get("time_limit"),
            priority=given("priority", 0),
            model=data.get("model") or "",
            plan=(data.get("plan") or "").strip(),
            allowed_plans=tuple(p for p in (data.get("allowed_plans") or "").replace(",", " ").split() if p),
            min_gpus=data.get("min_gpus"),
            max_gpus=data.get("max_gpus"),
            guaranteed=bool(data.get("guaranteed")),
            adaptive_app=(data.get("adaptive_app") or "").strip(),
            image=data.get("image") or "",
            project=(data.get("project") or "").strip(),
            dependency=(data.get("dependency") or "").strip(),
        )


#: The job list's groups of states: each choice's value and the states it stands for.
STATE_GROUPS = {"live": sorted(LIVE_STATES), "ended": sorted(TERMINAL_STATES)}


class JobFilterForm(forms.Form):
    state = forms.ChoiceField(choices=[("", "any state"), ("live", "not ended (waiting or running)"),
                                       ("ended", "ended"), *JobState.choices], required=False)
    job_class = forms.ChoiceField(choices=[("", "any class"), *JobClassChoice.choices], required=False, label="Class")
    owner = forms.CharField(required=False, max_length=150, help_text="Staff: a username.")
    arrays = forms.ChoiceField(choices=[("", "arrays expanded"), ("collapsed", "arrays collapsed")], required=False,
                               label="Arrays")
    # Jobs waiting or running at some moment of these days, as sacct -S / -E select (``filter_jobs``).
    active_from = forms.DateField(required=False, label="Active from", widget=forms.DateInput(attrs={"type": "date"}))
    active_to = forms.DateField(required=False, label="Active until (that day included)",
                                widget=forms.DateInput(attrs={"type": "date"}))

    def clean(self) -> dict:
        """The days as instants: ``active_from`` at its midnight (UTC), ``active_to`` at the next."""
        data = super().clean()
        for name, end_of_day in (("active_from", False), ("active_to", True)):
            if data.get(name):
                data[name] = parse_instant(data[name].isoformat(), end_of_day)
        if data.get("active_from") and data.get("active_to") and data["active_to"] <= data["active_from"]:
            self.add_error("active_to", "Must not be before the first day.")
        return data


class PriorityForm(forms.Form):
    """The job page's priority change: the global range here; the owner's own ranges are the service's."""

    priority = forms.IntegerField(min_value=PRIORITY_RANGE[0], max_value=PRIORITY_RANGE[1])


class TokenForm(forms.Form):
    name = forms.CharField(max_length=100, help_text="Where you will use it, e.g. 'laptop CLI'.")


class SessionForm(forms.Form):
    """"Start a notebook": an interactive session's kind, GPUs, image and time limit."""

    kind = forms.ChoiceField(choices=SessionKind.choices, initial=SessionKind.JUPYTER, label="Session")
    num_gpus = forms.IntegerField(min_value=1, max_value=MAX_GPUS_PER_JOB, initial=1, label="GPUs")
    time_limit = DurationField(min_value=60, max_value=MAX_TIME_LIMIT_S, required=False, label="Time limit",
                               help_text="90m, 8h, HH:MM:SS or seconds. Empty: the site's default for sessions. "
                                         "The session ends then.")
    image = forms.ChoiceField(required=False, help_text="A registered image with the session's server in it; "
                                                        "none: the node's own environment.")

    def __init__(self, *args, **kwargs) -> None:  # noqa: ANN002, ANN003
        super().__init__(*args, **kwargs)
        self.fields["image"].choices = [("", "none"), *((n, n) for n in enabled_image_names())]
