"""The Celery application: the project's one connection to the message broker.

It carries agent commands (``cluster.commands``, on each node's queue), the
scheduling loop's own tasks (``scheduler.triggers``) and the web face's
background work. It lives at the bottom of the layers so that ``cluster/`` and
``scheduler/`` can send messages without importing the web face;
``portal.celery`` names it for ``celery -A portal``.

Configuration comes from Django settings prefixed ``CELERY_``; tasks are found
in every installed app's ``tasks`` module. Agents' queues (``node.<name>``) are
not consumed here: a portal worker listens on the default queue only.
Every message this app publishes beyond the nodes' queues is sealed with the
server's key, and a worker runs none that is not (``cluster.task_seal``).
"""

from __future__ import annotations

import os

from celery import Celery
from celery.signals import after_setup_logger

from cluster import task_log, task_seal
from cluster.worker_watchdog import ConsumerWatchdog

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

# Named "portal" as before the move: task routing and existing deployments know it by that name. Every
# task is a SealedTask: a worker runs only the reports and the tasks a server process sealed.
app = Celery("portal", task_cls=task_seal.SealedTask)
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
# A worker whose consumer stops taking messages (seen after Redis restarts) ends itself, to be restarted.
app.steps["consumer"].add(ConsumerWatchdog)


@after_setup_logger.connect
def quiet_routine_tasks(**_: object) -> None:
    """A worker or beat logs no line per routine task unless ``LOG_ROUTINE_TASKS`` (``cluster.task_log``)."""
    from django.conf import settings

    task_log.install(keep_routine=bool(getattr(settings, "LOG_ROUTINE_TASKS", False)))
