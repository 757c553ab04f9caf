"""The Django project and the web face: settings, pages, REST API, CLI.

The Celery app (``portal.celery``) is created when Django starts
(``PortalConfig.ready``), so that ``shared_task`` uses it, and ``celery -A portal``
finds it in ``portal.celery``. It is not imported with this package: the
command-line client (``portal.cli``) imports neither Django nor Celery and
starts faster without them.
"""

from typing import Any

__all__ = ("celery_app",)


def __getattr__(name: str) -> Any:
    """``portal.celery_app``, imported on first use (the standard Django/Celery name)."""
    if name == "celery_app":
        from portal.celery import app

        return app
    raise AttributeError(f"module 'portal' has no attribute {name!r}")
