from django.apps import AppConfig


class SchedulerConfig(AppConfig):
    """Jobs, their attempts and events, and quotas."""

    name = "scheduler"
    verbose_name = "Scheduler"

    def ready(self) -> None:
        from scheduler import checks  # noqa: F401  (registers system checks)
