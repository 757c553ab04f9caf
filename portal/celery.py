"""The Celery application of the portal.

Configuration comes from Django settings prefixed ``CELERY_``; tasks are found
in every installed app's ``tasks`` module. Agents' queues (``node.<name>``) are
not consumed here: a portal worker listens on the default queue only.
"""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

app = Celery("portal")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
