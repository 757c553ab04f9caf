import logging

from django.apps import AppConfig

log = logging.getLogger("scheduler")


class SchedulerConfig(AppConfig):
    """Jobs, their attempts and events, and quotas."""

    name = "scheduler"
    verbose_name = "Scheduler"

    def ready(self) -> None:
        from scheduler import checks  # noqa: F401  (registers system checks)
        from scheduler.identity import single_user_mode

        if single_user_mode():  # said at the start of every process: web, worker, beat, commands
            log.warning("single-user mode is on (GPUSCHED_SINGLE_USER): jobs run as the agents' own user, "
                        "unconfined; for a single person's machine only (docs/security.md)")
