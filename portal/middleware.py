"""Refuse oversized API request bodies before anything parses them."""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse


class ApiBodyLimitMiddleware:
    """Answer 413 JSON to an /api/ request whose body exceeds API_MAX_BODY_BYTES."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.path.startswith("/api/"):
            limit = settings.API_MAX_BODY_BYTES
            try:
                length = int(request.META.get("CONTENT_LENGTH") or 0)
            except ValueError:
                return JsonResponse({"detail": "Content-Length is not a number."}, status=400)
            if length > limit:
                return JsonResponse(
                    {"detail": f"Request body is {length} bytes; the limit is {limit} bytes."}, status=413
                )
        return self.get_response(request)
