"""A request that waited too long for a row another transaction holds is answered 503, not left hanging.

The web server's sessions give up waiting for a row lock after ``DATABASE_LOCK_WAIT_S`` seconds
(``portal.database.lock_wait_option``): PostgreSQL fails the statement with SQLSTATE 55P03 and the
transaction it ran in is rolled back, so the change it was part of is not written (a submission, a
cancellation, an admin form's save: each one transaction; cancelling an array is one per task, and
the tasks cancelled before the held one stay cancelled). Sending the request again is safe. This
middleware turns that error into ``503 Service Unavailable`` with ``Retry-After``: JSON
``{"detail": ...}`` under ``/api/``, a short page elsewhere. Any other database error goes on to
Django's usual handling.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from django.db import OperationalError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.template.loader import render_to_string

from scheduler.row_locks import is_lock_timeout

log = logging.getLogger("portal.held_rows")

#: Seconds a client is told to wait before sending the request again.
RETRY_AFTER_S = 2
DETAIL = ("A row this request must change is held by another transaction (an update in progress "
          "elsewhere), so the request stopped without making that change. Sending it again in a few "
          "seconds is safe.")


class HeldRowMiddleware:
    """Answer 503 with ``Retry-After`` when the view failed waiting for a row lock."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if not (isinstance(exception, OperationalError) and is_lock_timeout(exception)):
            return None
        log.warning("%s %s: a row it must change was held past DATABASE_LOCK_WAIT_S; answered 503",
                    request.method, request.path)
        if request.path.startswith("/api/"):
            response: HttpResponse = JsonResponse({"detail": DETAIL}, status=503)
        else:
            response = HttpResponse(render_to_string("503.html", {"detail": DETAIL}), status=503)
        response["Retry-After"] = str(RETRY_AFTER_S)
        return response
