"""The dashboard app: simulation runs (its model), live pages, and the realtime signal hooks."""

from __future__ import annotations

from django.apps import AppConfig


class DashboardConfig(AppConfig):
    name = "portal.dashboard"
    label = "dashboard"
    verbose_name = "Dashboard"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from portal import realtime
        from scheduler import announce

        realtime.connect_signals()
        announce.subscribe(realtime)  # the loop's and the agent services' announcements become live hints
