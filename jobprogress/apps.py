from django.apps import AppConfig


class JobProgressConfig(AppConfig):
    name = "jobprogress"
    verbose_name = "Job progress"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        """Start-time forecasts take a running job's remaining time from its own progress reports."""
        from jobprogress.selectors import running_remaining_seconds
        from scheduler import forecasts

        forecasts.add_remaining_source(running_remaining_seconds)
