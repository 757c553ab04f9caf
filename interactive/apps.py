from django.apps import AppConfig


class InteractiveConfig(AppConfig):
    name = "interactive"
    verbose_name = "Interactive sessions"
    default_auto_field = "django.db.models.BigAutoField"
