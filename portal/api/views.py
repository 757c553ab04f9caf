"""REST API views: parse, call one service or selector, render. No rules here."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.http import Http404, HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, PolymorphicProxySerializer, extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from cluster.selectors import nodes_for
from portal.api.errors import validation_error
from portal.api.log_query import LOG_PAGE_LINES, LOG_PAGE_MAX_LINES, log_query
from audit import services as audit
from portal.api.serializers import (
    DetailSerializer,
    ErrorsSerializer,
    ImageSerializer,
    JobArraySerializer,
    JobArraySubmitSerializer,
    JobSerializer,
    JobSubmitSerializer,
    JobUpdateSerializer,
    LogSerializer,
    NodeSerializer,
    QuotaExceededSerializer,
    QuotaReportSerializer,
)
from scheduler import arrays, fair_standing, holds, job_priority, selectors, services, usage
from scheduler.attempt_log import LogPage, log_page
from scheduler.models import Attempt, Job, JobClassChoice, JobState

#: The user model's username length: a longer ``owner`` filter names no user.
MAX_USERNAME_LENGTH = get_user_model()._meta.get_field("username").max_length

_LIST_PARAMS = [
    # An empty value means "no filter", as the web form sends it.
    OpenApiParameter("state", str, description="Only jobs in this state, or in any of several comma-separated ones "
                     f"(empty: all): {', '.join(JobState.values)}."),
    OpenApiParameter("job_class", str, enum=[*JobClassChoice.values, ""], description="Only TE or only BE jobs (empty: both)."),
    OpenApiParameter("owner", str, description="Staff only: only this user's jobs."),
    OpenApiParameter("array", int, description="Only the tasks of this job array (its id: the first task's job id)."),
    OpenApiParameter("from", str, description="Only jobs not ended before this instant, as sacct -S: YYYY-MM-DD "
                     "(midnight UTC) or an ISO date-time."),
    OpenApiParameter("to", str, description="Only jobs submitted before this instant, as sacct -E: YYYY-MM-DD "
                     "(that day included) or an ISO date-time."),
]


# A submission's 400 is either field errors or, for a body that is not JSON, a detail.
BAD_SUBMISSION = OpenApiResponse(
    PolymorphicProxySerializer(component_name="BadRequest", serializers=[ErrorsSerializer, DetailSerializer],
                               resource_type_field_name=None),
    description="Field errors ({errors: {field: [messages]}}), or a body that is not JSON ({detail}).",
)


def _active_window(params) -> tuple[dict, dict[str, list[str]]]:  # noqa: ANN001 - the query parameters
    """``from`` and ``to`` as ``filter_jobs``'s ``active_from`` / ``active_to``, and the errors, by field."""
    window, errors = {}, {}
    for name, key, end_of_day in (("from", "active_from", False), ("to", "active_to", True)):
        text = (params.get(name) or "").strip()
        if text:
            window[key] = usage.parse_instant(text, end_of_day)
            if window[key] is None:
                errors[name] = [f"{text[:40]!r} is not a date (YYYY-MM-DD) or an ISO date-time."]
    if not errors and "active_from" in window and "active_to" in window and window["active_to"] <= window["active_from"]:
        errors["to"] = ["Must be after from."]
    return window, errors


def _quota_body(v) -> dict:  # noqa: ANN001 - a scheduler.quotas.Violation
    """The 403 body of a refused submission."""
    return {"detail": v.message, "limit": v.limit, "limit_value": v.limit_value,
            "current_usage": v.current_usage, "requested": v.requested, "scope": v.scope}


class JobViewSet(mixins.ListModelMixin, viewsets.GenericViewSet):
    """Jobs of the caller (staff: of everyone). Another user's job id answers 404."""

    serializer_class = JobSerializer
    lookup_value_regex = r"[0-9]+(?:_[0-9]+)?"  # a job id, or an array task ID_INDEX

    def get_queryset(self):  # noqa: ANN201
        if getattr(self, "swagger_fake_view", False):  # schema generation has no user
            return Job.objects.none()
        return selectors.visible_jobs(self.request.user).prefetch_related("attempts", "events")

    def _visible_job(self, pk: str):  # noqa: ANN202
        job_id = arrays.visible_task_id(self.request.user, pk or "")  # 12, or 12_3 for a task of array 12
        if job_id is None:
            raise Http404
        job = selectors.job_with_history(self.request.user, job_id)
        if job is None:
            raise Http404
        return job

    def _addressed(self, pk: str | None) -> tuple[Job, bool]:
        """The job ``pk`` names, and whether a change addresses every task of the array it heads
        (``12``; ``12_0`` is its first task alone: ``arrays.names_array``)."""
        return self._visible_job(pk), arrays.names_array(pk or "")

    @extend_schema(parameters=_LIST_PARAMS, responses={
        200: JobSerializer(many=True), 400: ErrorsSerializer,
        404: OpenApiResponse(DetailSerializer, description="A page number past the last page."),
    })
    def list(self, request: Request, *args, **kwargs) -> Response:
        filters = {}
        errors = {}
        for name in ("state", "job_class"):
            value = request.query_params.get(name)
            if value:
                # state may name several, comma-separated (squeue -t PENDING,RUNNING): jobs in any of them.
                values = list(dict.fromkeys(value.split(","))) if name == "state" else [value]  # each once
                unknown = [v for v in values if v not in selectors.JOB_FILTERS[name]]
                if unknown:
                    errors[name] = [f'"{unknown[0][:40]}" is not one of {", ".join(sorted(selectors.JOB_FILTERS[name]))}.']
                filters[name] = values if len(values) > 1 else values[0]
        owner = request.query_params.get("owner")
        if owner and request.user.is_staff:
            if len(owner) > MAX_USERNAME_LENGTH:
                errors["owner"] = [f"Not a username (at most {MAX_USERNAME_LENGTH} characters)."]
            filters["owner"] = owner
        array = request.query_params.get("array")
        if array:
            if not (array.isascii() and array.isdigit() and len(array) <= 18):
                errors["array"] = [f'"{array[:40]}" is not a job array id (a job id, such as 12).']
            else:
                filters["array_id"] = int(array)
        window, window_errors = _active_window(request.query_params)
        errors.update(window_errors)
        if errors:
            return validation_error(errors)
        jobs = selectors.filter_jobs(self.get_queryset(), **filters, **window)
        page = self.paginate_queryset(jobs)
        return self.get_paginated_response(self.get_serializer(page, many=True).data)

    @extend_schema(responses={200: JobSerializer, 404: DetailSerializer})
    def retrieve(self, request: Request, pk: str | None = None) -> Response:
        return Response(JobSerializer(self._visible_job(pk)).data)

    @extend_schema(
        request=JobSubmitSerializer,
        responses={
            201: JobSerializer,
            400: BAD_SUBMISSION,
            403: OpenApiResponse(QuotaExceededSerializer, description="A quota refuses the job."),
            413: DetailSerializer,
        },
    )
    def create(self, request: Request) -> Response:
        serializer = JobSubmitSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        try:
            job = services.submit_job(request.user, serializer.to_request())
        except services.JobRequestInvalid as exc:
            return validation_error(exc.errors)
        except services.QuotaExceeded as exc:
            return Response(_quota_body(exc.violation), status=status.HTTP_403_FORBIDDEN)
        # The job as just written, with its submission event: the same body a GET returns, without reading back.
        return Response(JobSerializer(job).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        request=JobArraySubmitSerializer,
        responses={
            201: JobArraySerializer,
            400: BAD_SUBMISSION,
            403: OpenApiResponse(QuotaExceededSerializer,
                                 description="A quota refuses a job of the array (its position in `index`)."),
            413: DetailSerializer,
        },
    )
    @action(detail=False, methods=["post"], url_path="array")
    def array(self, request: Request) -> Response:
        """Submit several jobs at once, all or none (like ``sbatch --array``)."""
        serializer = JobArraySubmitSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        try:
            jobs = services.submit_jobs(request.user, serializer.validated_data["jobs"],
                                        serializer.validated_data.get("indices"),
                                        serializer.validated_data.get("max_running"))
        except services.JobArrayInvalid as exc:
            return validation_error({f"jobs[{i}].{name}": messages
                                     for i, errors in exc.errors.items() for name, messages in errors.items()})
        except services.JobRequestInvalid as exc:  # about the submitter, not one job (``identity``)
            return validation_error(exc.errors)
        except services.QuotaExceeded as exc:
            return Response({**_quota_body(exc.violation), "index": exc.index}, status=status.HTTP_403_FORBIDDEN)
        return Response({"jobs": JobSerializer(jobs, many=True).data}, status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses={202: JobSerializer, 404: DetailSerializer, 409: DetailSerializer})
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk: str | None = None) -> Response:
        job, whole = self._addressed(pk)
        try:
            for cancelled in arrays.cancel_array(job, request.user, whole):
                audit.record_staff_cancel(request, cancelled)
        except services.JobNotCancellable as exc:
            return Response({"detail": str(exc), "state": exc.job.state}, status=status.HTTP_409_CONFLICT)
        return Response(JobSerializer(selectors.job_with_history(request.user, job.pk)).data,
                        status=status.HTTP_202_ACCEPTED)

    @extend_schema(request=JobUpdateSerializer, responses={200: JobSerializer, 400: ErrorsSerializer,
                                                           404: DetailSerializer, 409: DetailSerializer})
    def partial_update(self, request: Request, pk: str | None = None) -> Response:
        """Change a PENDING job's priority (the owner within their ranges; staff on another's job: any);
        an array's id: each of its waiting tasks, ``ID_INDEX``: that task alone."""
        job, whole = self._addressed(pk)
        serializer = JobUpdateSerializer(data=request.data)
        if not serializer.is_valid():
            return validation_error(serializer.errors)
        try:
            changed = job_priority.change_priority_of(job, request.user, serializer.validated_data["priority"], whole)
        except job_priority.PriorityRefused as exc:
            if exc.conflict:
                return Response({"detail": str(exc), "state": exc.job.state}, status=status.HTTP_409_CONFLICT)
            return validation_error({"priority": [str(exc)]})
        for one in changed:
            audit.record_staff_priority(request, one)
        return Response(JobSerializer(selectors.job_with_history(request.user, job.pk)).data)

    @extend_schema(request=None, responses={200: JobSerializer, 403: DetailSerializer, 404: DetailSerializer,
                                            409: DetailSerializer})
    @action(detail=True, methods=["post"])
    def hold(self, request: Request, pk: str | None = None) -> Response:
        """Keep a PENDING job from starting until it is released (an array's id: each of its pending tasks)."""
        return self._hold_change(pk, holds.hold_job)

    @extend_schema(request=None, responses={200: JobSerializer, 403: DetailSerializer, 404: DetailSerializer,
                                            409: DetailSerializer})
    @action(detail=True, methods=["post"])
    def release(self, request: Request, pk: str | None = None) -> Response:
        """Release a held job (an array's id: each of its tasks); an administrator's hold needs staff."""
        return self._hold_change(pk, holds.release_job)

    def _hold_change(self, pk: str | None, change) -> Response:  # noqa: ANN001 - holds.hold_job or release_job
        job, whole = self._addressed(pk)
        try:
            for changed in holds.for_array(job, self.request.user, change, whole):
                audit.record_staff_hold(self.request, changed, change.__name__)
        except holds.HoldRefused as exc:
            code = status.HTTP_409_CONFLICT if exc.conflict else status.HTTP_403_FORBIDDEN
            return Response({"detail": str(exc), "state": exc.job.state}, status=code)
        return Response(JobSerializer(selectors.job_with_history(self.request.user, job.pk)).data)

    @extend_schema(
        parameters=[
            OpenApiParameter("attempt", OpenApiTypes.INT, description="Attempt number; default the latest."),
            OpenApiParameter("offset", OpenApiTypes.INT, description="Skip this many lines (for polling)."),
            OpenApiParameter("limit", OpenApiTypes.INT, description=(
                f"Most lines in the answer (default {LOG_PAGE_LINES:,}, at most {LOG_PAGE_MAX_LINES:,}); "
                "`more` says whether lines follow, from `next_offset`.")),
            OpenApiParameter("tail", OpenApiTypes.INT, description=(
                "Start at the last this many lines instead; `offset` is then where they start.")),
        ],
        responses={200: LogSerializer, 400: ErrorsSerializer, 404: DetailSerializer},
    )
    @action(detail=True, methods=["get"])
    def logs(self, request: Request, pk: str | None = None) -> Response:
        job = self._visible_job(pk)
        numbers, errors = log_query(request.query_params)
        if errors:
            return validation_error(errors)
        attempts = Attempt.objects.filter(job=job)
        if "attempt" in numbers:
            attempt = attempts.filter(number=numbers["attempt"]).first()
            if attempt is None:
                raise Http404
        else:
            attempt = attempts.order_by("-number").first()
        limit = numbers.get("limit", LOG_PAGE_LINES)
        if attempt is None:
            page = LogPage(numbers.get("offset", 0), [], 0)
        elif "tail" in numbers:
            page = log_page(attempt.pk, 0, limit, tail=numbers["tail"])
        else:
            page = log_page(attempt.pk, numbers.get("offset", 0), limit)
        return Response({"attempt": attempt.number if attempt else None, "offset": page.offset, "lines": page.lines,
                         "next_offset": page.next_offset, "total_lines": page.total, "more": page.more})


    @extend_schema(responses={200: OpenApiResponse(description=(
        '{"job": id, "progress": null or {attempt, step, total_steps, fraction, epoch, metrics, checkpoint, '
        'updated_at, reported_at, steps_per_second, eta_seconds, history: {t, step, metrics}}}: what the '
        "job reported through gpusched.job (docs/jobs.md), for its newest attempt that reported.")),
        404: DetailSerializer})
    @action(detail=True, methods=["get"])
    def progress(self, request: Request, pk: str | None = None) -> Response:
        from jobprogress.selectors import job_progress

        job = self._visible_job(pk)
        return Response({"job": job.pk, "progress": job_progress(job.pk)})


class QuotaView(APIView):
    """The caller's effective limits and current usage."""

    @extend_schema(responses={200: QuotaReportSerializer})
    def get(self, request: Request) -> Response:
        return Response(selectors.quota_report(request.user))


class FairShareView(APIView):
    """Each project's fair-share standing now (``scheduler.fair_standing``, like Slurm's sshare):
    share, decayed usage, fair-share factor, GPUs held, wanted and entitled. Staff see every
    project; others the projects they belong to."""

    @extend_schema(responses={200: OpenApiTypes.OBJECT})
    def get(self, request: Request) -> Response:
        return Response(fair_standing.report(request.user))


class NodeListView(APIView):
    """Every node with its GPUs and state (read-only)."""

    @extend_schema(responses={200: NodeSerializer(many=True)})
    def get(self, request: Request) -> Response:
        return Response(NodeSerializer(nodes_for(request.user), many=True).data)


class ImageListView(APIView):
    """The images a job may name (enabled ones), for ``image`` in a submission."""

    @extend_schema(responses={200: ImageSerializer(many=True)})
    def get(self, request: Request) -> Response:
        return Response(ImageSerializer(selectors.enabled_images(), many=True).data)


_USAGE_PARAMS = [
    OpenApiParameter("from", str, description="Start: an ISO date (its midnight, UTC) or date-time; default: 7 days "
                                              "before to."),
    OpenApiParameter("to", str, description="End: an ISO date (included) or date-time; default: now."),
    OpenApiParameter("by", str, enum=[*usage.BY, ""], description="Group by project or user (empty: project)."),
]


class UsageView(APIView):
    """GPU-hours, jobs, preemptions and lost GPU-hours by project or user and class over a period
    (``scheduler.usage``), with a series for charts and the quotas beside. Staff see every job;
    others the jobs of their projects and their own."""

    @extend_schema(parameters=_USAGE_PARAMS, responses={200: OpenApiTypes.OBJECT, 400: ErrorsSerializer})
    def get(self, request: Request) -> Response:
        try:
            query = usage.parse_query(request.query_params)
        except usage.UsageQueryInvalid as exc:
            return validation_error(exc.errors)
        return Response(usage.report(request.user, query))


class UsageCsvView(APIView):
    """The rows of GET /api/v1/usage/ as CSV (same parameters and visibility)."""

    @extend_schema(parameters=_USAGE_PARAMS, responses={(200, "text/csv"): OpenApiTypes.STR, 400: ErrorsSerializer})
    def get(self, request: Request) -> HttpResponse | Response:
        try:
            query = usage.parse_query(request.query_params)
        except usage.UsageQueryInvalid as exc:
            return validation_error(exc.errors)
        return usage_csv_response(usage.report(request.user, query))


def usage_csv_response(data: dict) -> HttpResponse:
    """A CSV download of a usage report, named after its period and grouping."""
    name = f"usage-by-{data['by']}-{data['from'][:10]}-{data['to'][:10]}.csv"
    return HttpResponse(usage.as_csv(data), content_type="text/csv; charset=utf-8",
                        headers={"Content-Disposition": f'attachment; filename="{name}"'})
