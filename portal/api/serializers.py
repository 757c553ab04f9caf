"""Request parsing and response shapes of the REST API.

Input fields are strict about JSON types (a number is not accepted as a string
or the other way round, booleans are not numbers) and unknown fields are
refused by name. The rules beyond types live in
``scheduler.services.validate_request``, shared with the browser form.
"""

from __future__ import annotations

import math
from dataclasses import replace

from rest_framework import serializers

from portal.api.built_once import FieldsBuiltOnce
from scheduler.models import (
    DEFAULT_GRACE_PERIOD_S,
    MAX_COMMAND_LENGTH,
    MAX_CPUS_PER_JOB,
    MAX_GPUS_PER_JOB,
    MAX_GRACE_PERIOD_S,
    MAX_MEM_GB_PER_JOB,
    MAX_NAME_LENGTH,
    MAX_TIME_LIMIT_S,
    PRIORITY_RANGE,
    Attempt,
    Job,
    JobClassChoice,
    JobEvent,
    JobState,
)
from scheduler import fair_usage, forecast_store
from scheduler.core.arrays import ArrayError, parse_array, split_limit
from scheduler.core.priority_factors import priority_factors
from scheduler.services import MAX_ARRAY_JOBS, JobRequest


class StrictIntegerField(serializers.IntegerField):
    """A JSON integer; strings, booleans and fractions are refused."""

    def to_internal_value(self, data):  # noqa: ANN001, ANN201
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictFloatField(serializers.FloatField):
    """A JSON number (integer or fraction); strings and booleans are refused."""

    def to_internal_value(self, data):  # noqa: ANN001, ANN201
        if isinstance(data, bool) or not isinstance(data, int | float):
            self.fail("invalid")
        if isinstance(data, float) and not math.isfinite(data):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictCharField(serializers.CharField):
    """A JSON string; numbers and other types are refused."""

    default_error_messages = {"invalid": "Not a valid string."}

    def to_internal_value(self, data):  # noqa: ANN001, ANN201
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictBooleanField(serializers.BooleanField):
    """A JSON true or false; strings and numbers are refused."""

    def to_internal_value(self, data):  # noqa: ANN001, ANN201
        if not isinstance(data, bool):
            self.fail("invalid")
        return data


class StrictStringListField(serializers.ListField):
    """A JSON list of strings; errors are flat messages naming the item (``[2]: Not a valid string.``),
    as the documented error body wants (a list of strings per field)."""

    def __init__(self, *, item_max_length: int, **kwargs) -> None:  # noqa: ANN003
        super().__init__(child=StrictCharField(max_length=item_max_length), **kwargs)
        self.item_max_length = item_max_length

    def to_internal_value(self, data):  # noqa: ANN001, ANN201
        if not isinstance(data, list):
            raise serializers.ValidationError(f"Expected a list of strings, got {type(data).__name__}.")
        if self.max_length is not None and len(data) > self.max_length:
            raise serializers.ValidationError(f"At most {self.max_length} items.")
        problems = [f"[{i}]: Not a valid string." if not isinstance(item, str)
                    else f"[{i}]: At most {self.item_max_length} characters."
                    for i, item in enumerate(data)
                    if not isinstance(item, str) or len(item) > self.item_max_length]
        if problems:
            raise serializers.ValidationError(problems)
        return list(data)


class JobUpdateSerializer(serializers.Serializer):
    """``PATCH /api/v1/jobs/{id}/``: what may change after submission (a PENDING job's priority)."""

    priority = serializers.IntegerField(help_text="The new priority, within the range allowed at submission.")

    def to_internal_value(self, data):  # noqa: ANN001, ANN201 - DRF's signature
        """Every field that cannot change is named, beside the priority's own errors (a body of only
        ``{"name": ...}`` names ``name``, not only the missing priority)."""
        fixed = {name: ["Cannot be changed after submission."]
                 for name in sorted(set(data) - {"priority"})} if isinstance(data, dict) else {}
        try:
            value = super().to_internal_value(data)
        except serializers.ValidationError as exc:
            raise serializers.ValidationError({**fixed, **exc.detail}) from None
        if fixed:
            raise serializers.ValidationError(fixed)
        return value


class JobSubmitSerializer(FieldsBuiltOnce, serializers.Serializer):
    """The body of POST /api/v1/jobs/."""

    name = StrictCharField(max_length=MAX_NAME_LENGTH)
    command = StrictCharField(max_length=MAX_COMMAND_LENGTH, trim_whitespace=False)
    job_class = serializers.ChoiceField(choices=JobClassChoice.values, default=JobClassChoice.BE)
    num_gpus = StrictIntegerField(min_value=1, max_value=MAX_GPUS_PER_JOB, default=1)
    num_cpus = StrictFloatField(min_value=0, max_value=MAX_CPUS_PER_JOB, default=0.0)
    mem_gb = StrictFloatField(min_value=0, max_value=MAX_MEM_GB_PER_JOB, default=0.0)
    grace_period = StrictIntegerField(min_value=0, max_value=MAX_GRACE_PERIOD_S, default=DEFAULT_GRACE_PERIOD_S)
    time_limit = StrictIntegerField(min_value=1, max_value=MAX_TIME_LIMIT_S, required=False, allow_null=True,
                                    default=None)
    priority = StrictIntegerField(min_value=PRIORITY_RANGE[0], max_value=PRIORITY_RANGE[1], default=0)
    # Reconfigurable training jobs; the rules are scheduler.elastic.clean_request's.
    model = StrictCharField(max_length=32, allow_blank=True, default="",
                            help_text="Performance-model name (bert, gpt2, ...); empty: not reconfigurable.")
    plan = StrictCharField(max_length=32, allow_blank=True, default="", help_text="Execution plan (ga, zero-dp, 244, ...).")
    allowed_plans = StrictStringListField(item_max_length=32, max_length=16, default=list,
                                          help_text="Plans the scheduler may switch the job to.")
    min_gpus = StrictIntegerField(min_value=1, max_value=MAX_GPUS_PER_JOB, required=False, allow_null=True, default=None)
    max_gpus = StrictIntegerField(min_value=1, max_value=MAX_GPUS_PER_JOB, required=False, allow_null=True, default=None)
    guaranteed = StrictBooleanField(default=False)
    adaptive_app = StrictCharField(max_length=32, allow_blank=True, default="",
                                   help_text="An adaptive (Pollux) job's profile (cifar10, bert, ...); empty: none.")
    image = StrictCharField(max_length=200, allow_blank=True, default="",
                            help_text="A registered image to run in (GET /api/v1/images/ lists them); empty: none.")
    project = StrictCharField(max_length=64, allow_blank=True, default="",
                              help_text="The project to charge, one you are a member of; empty: your default.")
    dependency = StrictCharField(max_length=1000, allow_blank=True, default="",
                                 help_text="Jobs to wait for, as Slurm's --dependency: afterok|afterany|afternotok:"
                                           "ID[:ID], comma-joined; your jobs or your project's. Empty: none.")

    def validate_command(self, value: str) -> str:
        if not value.strip():
            raise serializers.ValidationError("This field may not be blank.")
        return value

    def to_internal_value(self, data):  # noqa: ANN001, ANN201
        """Parse the known fields; unknown ones are errors reported with all the others."""
        unknown = {name: ["Unknown field."] for name in sorted(set(data) - set(self.fields))} if isinstance(
            data, dict) else {}
        try:
            value = super().to_internal_value(data)
        except serializers.ValidationError as exc:
            if unknown and isinstance(exc.detail, dict):
                raise serializers.ValidationError({**exc.detail, **unknown}) from None
            raise
        if unknown:
            raise serializers.ValidationError(unknown)
        return value

    def to_request(self) -> JobRequest:
        return JobRequest(**self.validated_data)


class AttemptSerializer(FieldsBuiltOnce, serializers.ModelSerializer):
    node_names = serializers.ListField(child=serializers.CharField(), read_only=True)
    gpu_indices = serializers.DictField(
        source="gpu_allocation", child=serializers.ListField(child=serializers.IntegerField()), read_only=True,
        help_text="GPU indices per node name.",
    )
    outcome = serializers.CharField(source="state", read_only=True)
    gpu_count = serializers.IntegerField(read_only=True, help_text="GPUs on all nodes: the plan history's GPU count.")

    class Meta:
        model = Attempt
        fields = [
            "number", "node_names", "gpu_indices", "started_at", "ended_at", "exit_code", "signal", "outcome",
            "notice_at", "vacated_at", "checkpointed", "checkpoint_marker", "lost_gpu_seconds",
            "plan", "gpu_count", "grad_accum_steps", "batch_size", "notice_reason", "peak_mem_bytes", "cpu_seconds", "message",
        ]
        read_only_fields = fields


class JobEventSerializer(FieldsBuiltOnce, serializers.ModelSerializer):
    state = serializers.CharField(source="to_state", read_only=True)

    class Meta:
        model = JobEvent
        fields = ["at", "from_state", "state", "reason", "message"]
        read_only_fields = fields


class JobSerializer(FieldsBuiltOnce, serializers.ModelSerializer):
    """The job object of every response."""

    owner = serializers.CharField(source="owner.username", read_only=True)
    image = serializers.SlugRelatedField(slug_field="name", read_only=True, allow_null=True,
                                         help_text="The image the job runs in; null: the node's root filesystem.")
    project = serializers.SlugRelatedField(slug_field="name", read_only=True, allow_null=True,
                                           help_text="The project the job is charged to; null: none.")
    attempts = AttemptSerializer(many=True, read_only=True)
    events = JobEventSerializer(many=True, read_only=True)
    priority_factors = serializers.SerializerMethodField(
        help_text="Pending jobs: what orders the job in the queue (class, fair share, priority, age), as Slurm's "
                  "sprio; fair_share is null while fair share is off; the age counts from waiting_since (the "
                  "submission time). Null for a job that is not pending."
    )

    forecast = serializers.SerializerMethodField(
        help_text="Pending jobs: the forecast start (null: not within the forecast's 14-day horizon), the job's "
                  "1-based position in its class's queue and when both were computed (recomputed in the background "
                  "a few seconds after each change; docs/jobs.md). Null for a job that is not pending or not yet "
                  "forecast."
    )

    class Meta:
        model = Job
        fields = [
            "id", "name", "owner", "command", "job_class", "num_gpus", "num_cpus", "mem_gb", "grace_period",
            "time_limit", "priority", "hold", "state", "pending_reason", "pending_message", "forecast", "submitted_at",
            "first_started_at", "started_at", "ended_at", "exit_code", "attempt_count", "preemption_count",
            "model", "plan", "allowed_plans", "min_gpus", "max_gpus", "guaranteed", "adaptive_app",
            "reconfiguration_count",
            "run_as", "image", "project", "dependency", "array_id", "array_index", "priority_factors", "attempts",
            "events",
        ]
        read_only_fields = fields

    def get_forecast(self, job: Job) -> dict | None:
        if job.state != JobState.PENDING:
            return None
        stored = forecast_store.read_one(job.pk)
        return stored.as_json() if stored is not None else None

    def get_priority_factors(self, job: Job) -> dict | None:
        if job.state != JobState.PENDING:
            return None
        # The age is given as the instant it counts from, not as seconds: a resource that changes every time
        # it is read could not be compared, cached or answered identically by a submission and a later read.
        submitted = job.submitted_at.timestamp()
        context = self.context
        if "fair_share_tenants" not in context:  # read once per response, not once per job
            context["fair_share_tenants"] = fair_usage.tenants_now()
        factors = priority_factors(job.job_class, job.priority, submitted, submitted,
                                   tenant=job.project.name if job.project else "",
                                   tenants=context["fair_share_tenants"])
        del factors["age_seconds"]
        return {**factors, "waiting_since": serializers.DateTimeField().to_representation(job.submitted_at)}


class QuotaExceededSerializer(serializers.Serializer):
    """The 403 body of a refused submission."""

    detail = serializers.CharField()
    limit = serializers.CharField()
    limit_value = serializers.FloatField()
    current_usage = serializers.FloatField()
    requested = serializers.FloatField(allow_null=True)
    scope = serializers.CharField()
    index = serializers.IntegerField(required=False, help_text="Job arrays only: the position of the job refused.")


class ErrorsSerializer(serializers.Serializer):
    errors = serializers.DictField(child=serializers.ListField(child=serializers.CharField()))


class DetailSerializer(serializers.Serializer):
    detail = serializers.CharField()


class LogSerializer(serializers.Serializer):
    attempt = serializers.IntegerField(allow_null=True)
    offset = serializers.IntegerField(help_text="Line number (from 0) of the first line in `lines`.")
    lines = serializers.ListField(child=serializers.CharField())
    next_offset = serializers.IntegerField(help_text="`offset` for the lines after these.")
    total_lines = serializers.IntegerField(help_text="Lines stored for the attempt so far.")
    more = serializers.BooleanField(help_text="Whether stored lines follow these (ask again from `next_offset`).")


class ImageSerializer(serializers.Serializer):
    name = serializers.CharField()
    digest = serializers.CharField(help_text="sha256:<hex> of the image's root filesystem tarball.")
    note = serializers.CharField()


class QuotaScopeSerializer(serializers.Serializer):
    scope = serializers.ChoiceField(choices=["user", "group"])
    name = serializers.CharField()
    limits = serializers.DictField()
    usage = serializers.DictField()


class QuotaReportSerializer(serializers.Serializer):
    limits = serializers.DictField(help_text="Effective (tightest) limit of each kind; null: unlimited.")
    usage = serializers.DictField(help_text="Usage measured against each limit, keyed by the limit's name.")
    own_usage = serializers.DictField(help_text="The caller's own GPUs held, TE GPUs held, GPU-hours, pending jobs.")
    scopes = QuotaScopeSerializer(many=True)


class GpuSerializer(serializers.Serializer):
    index = serializers.IntegerField()
    model_name = serializers.CharField()
    memory_mb = serializers.IntegerField(allow_null=True)
    allocated = serializers.BooleanField()
    allocated_to = serializers.IntegerField(
        allow_null=True, help_text="The job holding the GPU when the caller may see it (own job, or staff)."
    )


class NodeSerializer(serializers.Serializer):
    name = serializers.CharField()
    state = serializers.CharField()
    gpus = GpuSerializer(many=True, source="gpu_views")
    gpu_count = serializers.IntegerField(source="gpus_declared")
    free_gpus = serializers.IntegerField()
    cpus = serializers.FloatField()
    mem_gb = serializers.FloatField()
    last_heartbeat = serializers.DateTimeField(allow_null=True)
    agent_version = serializers.CharField()
    protocol_version = serializers.IntegerField(help_text="Message protocol version its agent speaks.")
    agent_outdated = serializers.BooleanField(
        help_text="Its agent speaks an older protocol than the server (accepted during a rolling upgrade).")



class JobArraySubmitSerializer(serializers.Serializer):
    """The body of POST /api/v1/jobs/array/: ``{"jobs": [job, ...]}``, each job as for POST /api/v1/jobs/,
    or ``{"array": "0-9:2", "jobs": [job]}``: one task per index, task i named ``<name>_i`` with ``%a`` in
    its command replaced by i (``scheduler.core.arrays``).

    Errors name the job's position and field: ``{"errors": {"jobs[3].num_gpus": [...]}}``, or ``array``.
    """

    jobs = serializers.ListField(child=serializers.DictField(), min_length=1, max_length=MAX_ARRAY_JOBS,
                                 help_text=f"1 to {MAX_ARRAY_JOBS} jobs, each the body of POST /api/v1/jobs/.")

    def to_internal_value(self, data):  # noqa: ANN001, ANN201
        """Check the envelope, then every job with ``JobSubmitSerializer``, reporting all errors at once."""
        if isinstance(data, dict):
            unknown = sorted(set(data) - {"jobs", "array"})
            if unknown:
                raise serializers.ValidationError({name: ["Unknown field."] for name in unknown})
        if not isinstance(data, dict) or not isinstance(data.get("jobs"), list):
            raise serializers.ValidationError({"jobs": ["A list of jobs is required."]})
        items = data["jobs"]
        if not 1 <= len(items) <= MAX_ARRAY_JOBS:
            raise serializers.ValidationError({"jobs": [f"Between 1 and {MAX_ARRAY_JOBS} jobs."]})
        errors: dict[str, list[str]] = {}
        requests = []
        for i, item in enumerate(items):
            if not isinstance(item, dict):
                errors[f"jobs[{i}]"] = ["A job must be a JSON object."]
                continue
            one = JobSubmitSerializer(data=item)
            if one.is_valid():
                requests.append(one.to_request())
            else:
                for name, messages in one.errors.items():
                    errors[f"jobs[{i}].{name}"] = [str(m) for m in messages]
        if errors:
            raise serializers.ValidationError(errors)
        if "array" not in data:
            return {"jobs": requests}
        return _expanded(data["array"], requests)


def _expanded(spec: object, requests: list[JobRequest]) -> dict:
    """One task per index of ``spec`` from the one job given; errors under ``array``."""
    try:
        spec, max_running = split_limit(spec if isinstance(spec, str) else "")
        indices = parse_array(spec, MAX_ARRAY_JOBS)
    except ArrayError as exc:
        raise serializers.ValidationError({"array": [str(exc)]}) from None
    if len(requests) != 1:
        raise serializers.ValidationError({"array": ["With array, give exactly one job (the template)."]})
    (req,) = requests
    return {"indices": list(indices), "max_running": max_running, "jobs": [
        replace(req, name=f"{req.name}_{i}", command=req.command.replace("%a", str(i))) for i in indices]}


class JobArraySerializer(serializers.Serializer):
    """The 201 body of a job array: the jobs in the order given."""

    jobs = JobSerializer(many=True)
