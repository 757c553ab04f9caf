"""REST API of interactive sessions: POST /api/v1/sessions/ starts one, GET /api/v1/sessions/<id>/ follows it.

A session is a job too: GET /api/v1/jobs/<id>/ shows it and POST
/api/v1/jobs/<id>/cancel/ stops it. No answer carries the session's secret.
"""

from __future__ import annotations

from django.utils import timezone
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from interactive import selectors as sessions, services as session_services
from interactive.models import SessionKind
from portal.api.errors import validation_error
from portal.api.serializers import DetailSerializer, QuotaExceededSerializer, StrictCharField, StrictIntegerField
from portal.api.views import BAD_SUBMISSION
from scheduler import selectors, services
from scheduler.models import MAX_GPUS_PER_JOB, MAX_TIME_LIMIT_S


class SessionSubmitSerializer(serializers.Serializer):
    """The body of POST /api/v1/sessions/."""

    kind = serializers.ChoiceField(choices=SessionKind.values, default=SessionKind.JUPYTER)
    num_gpus = StrictIntegerField(min_value=1, max_value=MAX_GPUS_PER_JOB, default=1)
    time_limit = StrictIntegerField(min_value=60, max_value=MAX_TIME_LIMIT_S, required=False, allow_null=True, default=None,
                                    help_text="Seconds; null: the site's default for sessions.")
    image = StrictCharField(max_length=200, allow_blank=True, default="",
                            help_text="A registered image with the session's server in it; empty: the node's.")


class SessionSerializer(serializers.Serializer):
    """A session's life (``interactive.selectors.status``)."""

    job = serializers.IntegerField()
    state = serializers.CharField()
    kind = serializers.CharField()
    phase = serializers.ChoiceField(choices=["queued", "starting", "ready", "stopping", "ended"])
    url = serializers.CharField(allow_null=True, help_text="Where the browser opens it (ready only).")
    ready_at = serializers.CharField(allow_null=True)
    idle_seconds = serializers.FloatField(allow_null=True)
    time_left_seconds = serializers.FloatField(allow_null=True)
    queue_position = serializers.IntegerField(allow_null=True)
    pending_reason = serializers.CharField(allow_blank=True)
    ended_reason = serializers.CharField(allow_blank=True)


def _body(job) -> dict:  # noqa: ANN001 - a scheduler.models.Job
    return {"job": job.pk, "state": job.state, **sessions.status(job, timezone.now())}


class SessionCreateView(APIView):
    @extend_schema(request=SessionSubmitSerializer, responses={
        201: SessionSerializer, 400: BAD_SUBMISSION,
        403: OpenApiResponse(QuotaExceededSerializer, description="A quota refuses the session."),
        413: DetailSerializer,
    })
    def post(self, request: Request) -> Response:
        serializer = SessionSubmitSerializer(data=request.data)
        if not serializer.is_valid():
            return validation_error({k: [str(m) for m in v] for k, v in serializer.errors.items()})
        data = serializer.validated_data
        try:
            job = session_services.start_session(request.user, data["kind"], num_gpus=data["num_gpus"],
                                                 time_limit=data["time_limit"], image=data["image"])
        except services.JobRequestInvalid as exc:
            return validation_error(exc.errors)
        except services.QuotaExceeded as exc:
            v = exc.violation
            return Response({"detail": v.message, "limit": v.limit, "limit_value": v.limit_value,
                             "current_usage": v.current_usage, "requested": v.requested, "scope": v.scope},
                            status=status.HTTP_403_FORBIDDEN)
        return Response(_body(job), status=status.HTTP_201_CREATED)


class SessionDetailView(APIView):
    @extend_schema(responses={200: SessionSerializer, 404: DetailSerializer})
    def get(self, request: Request, job_id: int) -> Response:
        job = selectors.visible_jobs(request.user).filter(pk=job_id).exclude(session_kind="").first()
        if job is None:
            return Response({"detail": "Not found."}, status=status.HTTP_404_NOT_FOUND)
        return Response(_body(job))
