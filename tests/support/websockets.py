"""Fixtures for the live pages' tests: an in-memory channel layer and WebSocket helpers."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest


@pytest.fixture
def memory_layer(settings):  # noqa: ANN001
    """The in-memory channel layer, with no hint left over from another test."""
    from channels.layers import get_channel_layer

    from portal import realtime

    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    realtime.discard_pending()
    realtime.reset_cooldown()
    yield get_channel_layer()
    realtime.discard_pending()
    realtime.reset_cooldown()


@pytest.fixture
def ws_connect(memory_layer) -> Callable[..., Any]:  # noqa: ANN001
    """``await ws_connect(path, user)``: a connected WebsocketCommunicator for the routes of portal.routing,
    with ``scope["user"]`` set as the session middleware would set it (``None``: anonymous)."""
    from channels.routing import URLRouter
    from channels.testing import WebsocketCommunicator
    from django.contrib.auth.models import AnonymousUser

    from portal.routing import websocket_urlpatterns

    app = URLRouter(websocket_urlpatterns)

    async def connect(path: str, user: Any | None) -> tuple[Any, bool]:
        communicator = WebsocketCommunicator(app, path)
        communicator.scope["user"] = user if user is not None else AnonymousUser()
        connected, _ = await communicator.connect()
        return communicator, connected

    return connect
