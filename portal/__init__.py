"""The Django project and the web face: settings, pages, REST API, CLI.

The Celery app is imported here so that ``shared_task`` uses it whenever Django
starts (the standard Django/Celery layout).
"""

from portal.celery import app as celery_app

__all__ = ("celery_app",)
