from django.apps import AppConfig


class GpuTelemetryConfig(AppConfig):
    name = "gputelemetry"
    verbose_name = "GPU telemetry"
    default_auto_field = "django.db.models.BigAutoField"
