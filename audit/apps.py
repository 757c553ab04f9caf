from django.apps import AppConfig


class AuditConfig(AppConfig):
    """The append-only record of privileged actions."""

    name = "audit"
    verbose_name = "Audit log"
