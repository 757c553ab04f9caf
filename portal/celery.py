"""The Celery application, where ``celery -A portal`` looks for it.

The app itself is defined below the web face, in ``cluster.broker``, so that
the scheduling loop and the agent services send messages without importing
``portal``.
"""

from __future__ import annotations

from cluster.broker import app

__all__ = ("app",)
