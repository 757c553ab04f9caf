"""WebSocket URL routes (consumers are added by the live-view work)."""

from __future__ import annotations

websocket_urlpatterns: list = []
