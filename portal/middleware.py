"""Refuse what no view should see: oversized API request bodies, null characters in the query string."""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest, JsonResponse


class ApiBodyLimitMiddleware:
    """Answer 413 JSON to an /api/ request whose body exceeds API_MAX_BODY_BYTES.

    The declared Content-Length is checked first. A body sent without one
    (``Transfer-Encoding: chunked``) is measured by what was received: under
    ASGI the server has buffered it before the view runs, and Django reads it
    refusing anything past ``DATA_UPLOAD_MAX_MEMORY_SIZE`` (never below this
    limit). A body within the limit is then given the Content-Length it had,
    so the API parses it like any other (DRF treats a request without one as
    having no body).
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.path.startswith("/api/"):
            limit = settings.API_MAX_BODY_BYTES
            declared = request.META.get("CONTENT_LENGTH")
            if declared:
                try:
                    length = int(declared)
                except ValueError:
                    return JsonResponse({"detail": "Content-Length is not a number."}, status=400)
                if length > limit:
                    return too_large(f"Request body is {length} bytes; the limit is {limit} bytes.")
            else:
                try:
                    length = len(request.body)
                except RequestDataTooBig:
                    length = None
                if length is None or length > limit:
                    return too_large(f"Request body is over the limit of {limit} bytes.")
                if length:
                    request.META["CONTENT_LENGTH"] = str(length)
        return self.get_response(request)


class NullInQueryMiddleware:
    """Answer 400 to a request whose query string holds a null character (``%00``) in a name or value.

    PostgreSQL refuses NUL in text, so a filter built from such a value failed in the database, a 500
    (the admin's list filters, the API's staff ``owner`` filter); no parameter of this site can hold
    one. Under ``/api/`` the body is the API's field errors, ``{"errors": {name: [message]}}``, naming
    the parameter; plain text elsewhere.
    """

    MESSAGE = "Null characters are not allowed."

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        raw = request.META.get("QUERY_STRING", "")
        if "%00" in raw or "\x00" in raw:
            for name, values in request.GET.lists():
                if "\x00" in name or any("\x00" in value for value in values):
                    return self._refuse(request, name)
        return self.get_response(request)

    def _refuse(self, request: HttpRequest, name: str) -> HttpResponse:
        if request.path.startswith("/api/"):
            return JsonResponse({"errors": {name: [self.MESSAGE]}}, status=400)
        return HttpResponseBadRequest(f"{self.MESSAGE[:-1]} in the query string (parameter {name!r}).",
                                      content_type="text/plain; charset=utf-8")


def too_large(detail: str) -> JsonResponse:
    return JsonResponse({"detail": detail}, status=413)
