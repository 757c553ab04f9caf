"""The REST face of notifications (/api/v1/notifications/, webhooks/, deliveries/, jobs/<id>/notifications/):
the same choices, webhooks and delivery log as the settings page, for scripts and the CLI.

Each user reads and changes only their own; a job's choices are read by whoever may see the job and
changed by its owner only (they notify the owner). A webhook's secret is returned once, when it is
created, as the page shows it once. Bad input is refused under the field's name; nothing is written.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.http import Http404
from drf_spectacular.utils import extend_schema, extend_schema_field, inline_serializer
from rest_framework import serializers, status
from rest_framework.exceptions import PermissionDenied
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from notifications import addresses
from notifications.events import KINDS, clean_kinds
from notifications.models import Delivery, JobPreference, Preference, Webhook
from notifications.services import choices_for
from scheduler import selectors

DELIVERIES_LISTED = 100
MAX_WEBHOOKS = 10


@extend_schema_field(serializers.ListField(child=serializers.ChoiceField(choices=KINDS)))
class KindsField(serializers.Field):
    """A list of event names, returned in canonical order; an unknown name is refused with its value."""

    def to_internal_value(self, data: Any) -> list[str]:
        try:
            return clean_kinds(data)
        except ValueError as exc:
            raise serializers.ValidationError(str(exc)) from None

    def to_representation(self, value: list[str]) -> list[str]:
        return list(value)


class ChoicesSerializer(serializers.Serializer):
    email_events = KindsField()
    webhook_events = KindsField()


class WebhookSerializer(serializers.ModelSerializer):
    class Meta:
        model = Webhook
        fields = ["id", "url", "active", "allow_private", "created_at"]
        read_only_fields = ["id", "active", "allow_private", "created_at"]

    def validate_url(self, url: str) -> str:
        try:
            addresses.check(url)  # a new webhook never has allow_private: only an administrator sets it
        except addresses.RefusedUrl as exc:
            raise serializers.ValidationError(str(exc)) from None
        return url


class DeliverySerializer(serializers.ModelSerializer):
    class Meta:
        model = Delivery
        fields = ["id", "channel", "webhook", "job", "event", "target", "status", "attempts", "response_code",
                  "error", "created_at", "updated_at"]


class DefaultsSerializer(ChoicesSerializer):
    email = serializers.EmailField(read_only=True, help_text="Where email notifications go (the account's address).")


class JobChoicesSerializer(ChoicesSerializer):
    own = serializers.BooleanField(read_only=True, help_text="False while the job follows its owner's default.")


class NewWebhookSerializer(WebhookSerializer):
    class Meta(WebhookSerializer.Meta):
        fields = [*WebhookSerializer.Meta.fields, "secret"]
        read_only_fields = [*WebhookSerializer.Meta.read_only_fields, "secret"]


_DETAIL = inline_serializer("NotificationDetail", {"detail": serializers.CharField()})
# A 400 is field errors, or a detail for a body that is not JSON (portal/api/errors.py).
_ERRORS = inline_serializer("NotificationErrors", {
    "errors": serializers.DictField(child=serializers.ListField(child=serializers.CharField()), required=False),
    "detail": serializers.CharField(required=False)})


def _choices(email: list[str], webhook: list[str]) -> dict[str, list[str]]:
    return {"email_events": email, "webhook_events": webhook}


class PreferenceView(APIView):
    """GET: my default choices; PUT ``{email_events, webhook_events}``: replace them."""

    @extend_schema(responses={200: DefaultsSerializer})
    def get(self, request: Request) -> Response:
        found = Preference.objects.filter(user=request.user).first() or Preference(user=request.user)
        return Response({**_choices(found.email_events, found.webhook_events), "email": request.user.email})

    @extend_schema(request=ChoicesSerializer, responses={200: DefaultsSerializer, 400: _ERRORS})
    def put(self, request: Request) -> Response:
        given = ChoicesSerializer(data=request.data)
        given.is_valid(raise_exception=True)
        Preference.objects.update_or_create(user=request.user, defaults=dict(given.validated_data))
        return self.get(request)


class WebhookListView(APIView):
    """GET: my webhooks (no secrets); POST ``{url}``: add one, the answer carries its secret once."""

    @extend_schema(responses={200: WebhookSerializer(many=True)})
    def get(self, request: Request) -> Response:
        mine = Webhook.objects.filter(owner=request.user, project__isnull=True).order_by("pk")
        return Response(WebhookSerializer(mine, many=True).data)

    @extend_schema(request=WebhookSerializer, responses={201: NewWebhookSerializer, 400: _ERRORS})
    def post(self, request: Request) -> Response:
        given = WebhookSerializer(data=request.data)
        given.is_valid(raise_exception=True)
        with transaction.atomic():
            mine = Webhook.objects.select_for_update().filter(owner=request.user, project__isnull=True)
            if mine.count() >= MAX_WEBHOOKS:
                raise serializers.ValidationError({"url": [f"at most {MAX_WEBHOOKS} webhooks per user"]})
            hook = Webhook.objects.create(owner=request.user, url=given.validated_data["url"])
        return Response(NewWebhookSerializer(hook).data, status=status.HTTP_201_CREATED)


class WebhookDetailView(APIView):
    """DELETE: remove one of my webhooks (404 for anyone else's)."""

    @extend_schema(responses={204: None, 404: _DETAIL})
    def delete(self, request: Request, webhook_id: int) -> Response:
        if Webhook.objects.filter(pk=webhook_id, owner=request.user, project__isnull=True).delete()[0] == 0:
            raise Http404
        return Response(status=status.HTTP_204_NO_CONTENT)


class DeliveryListView(APIView):
    """GET: my latest deliveries, newest first."""

    @extend_schema(responses={200: DeliverySerializer(many=True)})
    def get(self, request: Request) -> Response:
        rows = Delivery.objects.filter(owner=request.user).order_by("-pk")[:DELIVERIES_LISTED]
        return Response(DeliverySerializer(rows, many=True).data)


class JobChoicesView(APIView):
    """GET: one job's choices (``own``: false while it follows its owner's default); PUT: set them;
    DELETE: back to the default. Changes are its owner's alone."""

    def _job(self, request: Request, job_id: int, *, change: bool) -> Any:
        job = selectors.visible_jobs(request.user).filter(pk=job_id).first()
        if job is None:
            raise Http404
        if change and job.owner_id != request.user.pk:
            raise PermissionDenied("Only the job's owner chooses its notifications.")
        return job

    def _answer(self, job: Any) -> Response:
        email, webhook = choices_for(job)
        return Response({**_choices(email, webhook), "own": JobPreference.objects.filter(job=job).exists()})

    @extend_schema(responses={200: JobChoicesSerializer, 404: _DETAIL})
    def get(self, request: Request, job_id: int) -> Response:
        return self._answer(self._job(request, job_id, change=False))

    @extend_schema(request=ChoicesSerializer,
                   responses={200: JobChoicesSerializer, 400: _ERRORS, 403: _DETAIL, 404: _DETAIL})
    def put(self, request: Request, job_id: int) -> Response:
        job = self._job(request, job_id, change=True)
        given = ChoicesSerializer(data=request.data)
        given.is_valid(raise_exception=True)
        JobPreference.objects.update_or_create(job=job, defaults=dict(given.validated_data))
        return self._answer(job)

    @extend_schema(responses={200: JobChoicesSerializer, 403: _DETAIL, 404: _DETAIL})
    def delete(self, request: Request, job_id: int) -> Response:
        job = self._job(request, job_id, change=True)
        JobPreference.objects.filter(job=job).delete()
        return self._answer(job)
