"""Every API error is JSON: ``{"errors": {field: [...]}}`` for validation, ``{"detail": ...}`` otherwise."""

from __future__ import annotations

from django.http import Http404, JsonResponse
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

NON_FIELD = "non_field_errors"


def exception_handler(exc: Exception, context: dict) -> Response | None:
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    if isinstance(exc, exceptions.ValidationError):
        detail = response.data
        if not isinstance(detail, dict):
            detail = {NON_FIELD: detail if isinstance(detail, list) else [detail]}
        response.data = {"errors": {k: v if isinstance(v, list) else [v] for k, v in detail.items()}}
    elif isinstance(exc, Http404) or isinstance(exc, exceptions.NotFound):
        response.data = {"detail": "Not found."}
    return response


def validation_error(errors: dict[str, list[str]]) -> Response:
    return Response({"errors": errors}, status=status.HTTP_400_BAD_REQUEST)


def json_not_found(request, exception=None) -> JsonResponse:  # noqa: ANN001 - Django handler signature
    return JsonResponse({"detail": "Not found."}, status=404)

