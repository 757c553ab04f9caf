from django.apps import AppConfig


class JobProgressConfig(AppConfig):
    name = "jobprogress"
    verbose_name = "Job progress"
    default_auto_field = "django.db.models.BigAutoField"
