"""Django's ASGI handler with the middleware chain and the view run in one worker-thread call.

Django's own ``ASGIHandler`` builds an asynchronous middleware chain. Our views are synchronous, and
so are most middlewares in practice: Django's ``MiddlewareMixin`` runs ``process_request`` and
``process_response`` of an asynchronous chain each through ``sync_to_async``, and a middleware that
is synchronous only (WhiteNoise's) switches the rest of the chain back with ``async_to_sync``. A
submission through the API crossed between the event loop and a worker thread about a dozen times
per request, and those crossings were a large share of the portal's CPU per request.

``OneCallASGIHandler`` builds the synchronous chain that the WSGI handler uses and runs all of it,
view included, in one ``sync_to_async`` call per request. The rest of the request's life (reading
the body, the request signals, sending the response, streaming) is Django's ASGI handler unchanged.
Views written ``async def`` still work: the synchronous chain runs them with ``async_to_sync``.
"""

from __future__ import annotations

from asgiref.sync import sync_to_async
from django.core.handlers.asgi import ASGIHandler
from django.http import HttpRequest, HttpResponseBase


class OneCallASGIHandler(ASGIHandler):
    """``ASGIHandler`` whose ``get_response_async`` is the synchronous ``get_response`` in one thread call."""

    def load_middleware(self, is_async: bool = False) -> None:
        """The synchronous chain, whatever Django asks for (it asks for the asynchronous one)."""
        super().load_middleware(is_async=False)

    async def get_response_async(self, request: HttpRequest) -> HttpResponseBase:
        # thread_sensitive: the same single thread Django gives synchronous views under ASGI, so the
        # views' use of the database connection is what it was.
        return await sync_to_async(self.get_response, thread_sensitive=True)(request)


def get_one_call_asgi_application() -> OneCallASGIHandler:
    """``django.core.asgi.get_asgi_application`` with ``OneCallASGIHandler``."""
    import django

    django.setup(set_prefix=False)
    return OneCallASGIHandler()
