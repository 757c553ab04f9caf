"""WebSocket URL routes of the live pages (see ``portal.consumers``)."""

from __future__ import annotations

from django.urls import path

from portal import consumers

websocket_urlpatterns = [
    path("ws/cluster/", consumers.ClusterConsumer.as_asgi()),
    path("ws/latency/", consumers.LatencyConsumer.as_asgi()),
    path("ws/jobs/<int:job_id>/", consumers.JobConsumer.as_asgi()),
]
