from django.apps import AppConfig


class PortalConfig(AppConfig):
    """The web face: API tokens, pages and the REST API."""

    name = "portal"
    verbose_name = "Portal"
