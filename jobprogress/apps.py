from django.apps import AppConfig


class JobProgressConfig(AppConfig):
    name = "jobprogress"
    verbose_name = "Job progress"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        """The scheduler takes steps, epochs and remaining time from jobs' own progress reports (``scheduler.measured``)."""
        from jobprogress.selectors import reported_epochs, reported_steps, running_remaining_seconds
        from scheduler import measured

        measured.add_remaining_source(running_remaining_seconds)
        measured.add_steps_source(reported_steps)
        measured.add_epochs_source(reported_epochs)
