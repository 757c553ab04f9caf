"""WebSocket URL routes of the live pages (see ``portal.consumers``) and of interactive sessions."""

from __future__ import annotations

from django.urls import path, re_path

from portal import consumers
from portal.session_socket import SessionSocketProxy

websocket_urlpatterns = [
    path("ws/cluster/", consumers.ClusterConsumer.as_asgi()),
    path("ws/latency/", consumers.LatencyConsumer.as_asgi()),
    path("ws/jobs/<int:job_id>/", consumers.JobConsumer.as_asgi()),
    # Everything under a session's prefix is its server's (the terminal's pty, JupyterLab's kernels).
    re_path(r"^sessions/[1-9][0-9]*/", SessionSocketProxy()),
]
