from django.apps import AppConfig


class PortalConfig(AppConfig):
    """The web face: API tokens, pages and the REST API."""

    name = "portal"
    verbose_name = "Portal"

    def ready(self) -> None:
        from django.contrib import admin

        from portal import celery, login, login_throttle  # noqa: F401 - the Celery app; login signal receivers

        admin.site.login_form = login.ThrottledAdminAuthenticationForm
