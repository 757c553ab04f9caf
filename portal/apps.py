from django.apps import AppConfig


class PortalConfig(AppConfig):
    """The web face: API tokens, pages and the REST API."""

    name = "portal"
    verbose_name = "Portal"

    def ready(self) -> None:
        from django.contrib import admin

        from portal import celery, login, login_throttle  # noqa: F401 - the Celery app; login signal receivers

        admin.site.login_form = login.ThrottledAdminAuthenticationForm
        self._tune_database_pool()

    @staticmethod
    def _tune_database_pool() -> None:
        """With a PostgreSQL pool (the web server), retry a lost PostgreSQL every second
        (``portal.database.retry_lost_postgresql_every_second`` says why)."""
        from django.conf import settings

        from portal.database import retry_lost_postgresql_every_second

        if settings.DATABASES["default"].get("OPTIONS", {}).get("pool"):
            retry_lost_postgresql_every_second()
