"""ASGI entry point: HTTP through Django, WebSockets through Channels, sessions through their proxy.

The WebSocket routes live in ``portal.routing.websocket_urlpatterns`` (the
live pages' consumers, ``portal.consumers``, and the sessions' proxy); they
are wrapped in session authentication and an allowed-hosts origin check.
HTTP requests for an interactive session's server (``portal.session_paths``:
``/sessions/<job id>/...`` but the terminal page) go to the session proxy,
wrapped in the same session authentication; every other one to Django.
"""

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

from portal.asgi_handler import get_one_call_asgi_application  # noqa: E402

# Django must be set up before anything imports models. Its middleware chain and views run in one
# worker-thread call per request (portal.asgi_handler says why).
django_asgi_app = get_one_call_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402

from portal.routing import websocket_urlpatterns  # noqa: E402
from portal.session_paths import is_proxied  # noqa: E402
from portal.session_proxy import SessionProxy  # noqa: E402

session_proxy = AuthMiddlewareStack(SessionProxy())


async def http(scope, receive, send):  # noqa: ANN001, ANN201 - the ASGI signature
    """Session URLs to the proxy, everything else to Django."""
    app = session_proxy if is_proxied(scope["path"]) else django_asgi_app
    return await app(scope, receive, send)


application = ProtocolTypeRouter(
    {
        "http": http,
        "websocket": AllowedHostsOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
    }
)
