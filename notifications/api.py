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
from rest_framework import serializers, status
from rest_framework.exceptions import PermissionDenied
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from notifications import addresses
from notifications.events import clean_kinds
from notifications.models import Delivery, JobPreference, Preference, Webhook
from notifications.services import choices_for
from scheduler import selectors

DELIVERIES_LISTED = 100
MAX_WEBHOOKS = 10


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


def _choices(email: list[str], webhook: list[str]) -> dict[str, list[str]]:
    return {"email_events": email, "webhook_events": webhook}


class PreferenceView(APIView):
    """GET: my default choices; PUT ``{email_events, webhook_events}``: replace them."""

    def get(self, request: Request) -> Response:
        found = Preference.objects.filter(user=request.user).first() or Preference(user=request.user)
        return Response({**_choices(found.email_events, found.webhook_events), "email": request.user.email})

    def put(self, request: Request) -> Response:
        given = ChoicesSerializer(data=request.data)
        given.is_valid(raise_exception=True)
        Preference.objects.update_or_create(user=request.user, defaults=dict(given.validated_data))
        return self.get(request)


class WebhookListView(APIView):
    """GET: my webhooks (no secrets); POST ``{url}``: add one, the answer carries its secret once."""

    def get(self, request: Request) -> Response:
        return Response(WebhookSerializer(Webhook.objects.filter(owner=request.user).order_by("pk"), many=True).data)

    def post(self, request: Request) -> Response:
        given = WebhookSerializer(data=request.data)
        given.is_valid(raise_exception=True)
        with transaction.atomic():
            if Webhook.objects.select_for_update().filter(owner=request.user).count() >= MAX_WEBHOOKS:
                raise serializers.ValidationError({"url": [f"at most {MAX_WEBHOOKS} webhooks per user"]})
            hook = Webhook.objects.create(owner=request.user, url=given.validated_data["url"])
        return Response({**WebhookSerializer(hook).data, "secret": hook.secret}, status=status.HTTP_201_CREATED)


class WebhookDetailView(APIView):
    """DELETE: remove one of my webhooks (404 for anyone else's)."""

    def delete(self, request: Request, webhook_id: int) -> Response:
        if Webhook.objects.filter(pk=webhook_id, owner=request.user).delete()[0] == 0:
            raise Http404
        return Response(status=status.HTTP_204_NO_CONTENT)


class DeliveryListView(APIView):
    """GET: my latest deliveries, newest first."""

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

    def get(self, request: Request, job_id: int) -> Response:
        return self._answer(self._job(request, job_id, change=False))

    def put(self, request: Request, job_id: int) -> Response:
        job = self._job(request, job_id, change=True)
        given = ChoicesSerializer(data=request.data)
        given.is_valid(raise_exception=True)
        JobPreference.objects.update_or_create(job=job, defaults=dict(given.validated_data))
        return self._answer(job)

    def delete(self, request: Request, job_id: int) -> Response:
        job = self._job(request, job_id, change=True)
        JobPreference.objects.filter(job=job).delete()
        return self._answer(job)
