"""A Celery worker whose consumer stopped taking messages ends itself, so that its supervisor restarts it.

After a broker outage (Redis restarted) a worker may come back alive, with its
embedded beat still sending ticks, yet never take another message from its
queues: its consumer's event loop lost the broker connection's registration, or
it never finished reconnecting. Nothing in the worker notices, and the
scheduling loop stops (no tick, no agent report handled) until someone restarts
the worker by hand.

``ConsumerWatchdog`` is a consumer bootstep that watches from a thread of the
worker's main process, independent of the event loop it guards. The worker is
stalled when, for ``WORKER_STALL_SECONDS`` on end, it held no task at all
(none reserved, none running) while the oldest message of one of its queues
stayed the same: an idle, healthy consumer takes a waiting message within
about a second (the Redis transport's BRPOP timeout). A busy worker, an empty
queue, or a broker that cannot be reached (the consumer's own reconnection
handles that) never counts as stalled. A stalled worker logs why at CRITICAL
and exits: a warm shutdown first, then, if that does not end it within
``EXIT_GRACE`` seconds, its children are killed and the process exits with
``STALLED_EXIT_CODE``. Run workers under a restart policy (docs/operations.md).

Only a Redis broker is watched; ``WORKER_STALL_SECONDS`` = 0 turns the
watchdog off.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from celery import bootsteps

logger = logging.getLogger(__name__)

#: Exit status of a worker ended because its consumer stalled (EX_SOFTWARE).
STALLED_EXIT_CODE = 70
#: Seconds a warm shutdown may take before the stalled worker is ended the hard way.
EXIT_GRACE = 30.0
#: kombu's Redis transport keeps a queue's messages of priority N > 0 in "<queue>\x06\x16<N>".
PRIORITY_SEP = "\x06\x16"
PRIORITY_STEPS = (0, 3, 6, 9)


def redis_list_keys(queues: Iterable[str]) -> list[str]:
    """The Redis lists holding the messages of ``queues``, every priority step of each."""
    return [q if pri == 0 else f"{q}{PRIORITY_SEP}{pri}" for q in queues for pri in PRIORITY_STEPS]


@dataclass
class StallClock:
    """Decides, from one observation after another, whether the worker's consumer has stalled.

    An observation is what the worker held (``busy``: any task reserved or running) and the oldest
    message of each of its queues (``None``: the broker could not be asked). The clock runs while
    the worker held nothing and some oldest message stayed the same; anything else restarts it."""

    stall_seconds: float
    since: float | None = None
    oldest: tuple | None = None

    def observe(self, now: float, busy: bool, oldest: tuple | None) -> bool:
        """Record one observation; True once the worker has been stalled for ``stall_seconds``."""
        waiting = oldest is not None and any(m is not None for m in oldest)
        if busy or not waiting:
            self.since, self.oldest = None, None
            return False
        if self.since is None or not self._same_message_still_waits(oldest):
            self.since, self.oldest = now, oldest
            return False
        return now - self.since >= self.stall_seconds

    def _same_message_still_waits(self, oldest: tuple) -> bool:
        # Stalled as long as one message that waited at the last reset still waits: taking messages of
        # one queue while another's oldest never moves is not a stall (it moves once its turn comes).
        return any(before is not None and before == now for before, now in zip(self.oldest, oldest, strict=True))


class Watchdog:
    """The watching thread's work; every collaborator is passed in, so a test drives it without a worker."""

    def __init__(self, stall_seconds: float, oldest: Callable[[], tuple | None], busy: Callable[[], bool],
                 on_stall: Callable[[float], None], clock: Callable[[], float] = time.monotonic) -> None:
        self.stall = StallClock(stall_seconds)
        self.oldest, self.busy, self.on_stall, self.clock = oldest, busy, on_stall, clock
        self.interval = max(0.2, stall_seconds / 10)
        self.stopped = threading.Event()

    def check(self) -> bool:
        """One look; calls ``on_stall`` and returns True when the consumer has stalled."""
        busy = self.busy()
        oldest = None if busy else self.oldest()
        if self.stall.observe(self.clock(), busy, oldest):
            self.on_stall(self.clock() - self.stall.since)
            return True
        return False

    def run(self) -> None:
        while not self.stopped.wait(self.interval):
            try:
                if self.check():
                    return
            except Exception:  # never let the watchdog itself take the worker down
                logger.exception("worker watchdog: check failed")


def oldest_messages(client, keys: list[str]) -> tuple | None:  # noqa: ANN001 - a redis.Redis
    """The oldest message of each list (kombu pushes on the left and pops on the right), or None
    when Redis cannot be asked."""
    import redis

    try:
        with client.pipeline(transaction=False) as pipe:
            for key in keys:
                pipe.lindex(key, -1)
            return tuple(pipe.execute())
    except redis.RedisError:
        return None


def worker_holds_tasks() -> bool:
    from celery.worker import state

    return bool(state.reserved_requests) or bool(state.active_requests)


def end_stalled_worker(waited: float, grace: float = EXIT_GRACE) -> None:
    """Ask the worker for a warm shutdown; if it is still there after ``grace`` seconds (its event
    loop may be the stuck part), kill its children (pool, embedded beat) and exit."""
    logger.critical("worker watchdog: the consumer took no message for %.0f s while holding no task and "
                    "messages waited in its queues; exiting so that the supervisor restarts the worker", waited)
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(grace)
    logger.critical("worker watchdog: no shutdown after %.0f s; exiting now", grace)
    try:
        import billiard

        for child in billiard.active_children():
            try:
                os.kill(child.pid, signal.SIGKILL)
            except (ProcessLookupError, TypeError):
                pass
    finally:
        os._exit(STALLED_EXIT_CODE)


def stall_seconds() -> float:
    from django.conf import settings

    return float(getattr(settings, "WORKER_STALL_SECONDS", 0) or 0)


class ConsumerWatchdog(bootsteps.StartStopStep):
    """Starts the watching thread once per worker process, when its consumer is created (so a worker
    stuck before it ever connected is seen too). Registered in ``cluster.broker``."""

    label = "consumer watchdog"

    def __init__(self, parent, **kwargs) -> None:  # noqa: ANN001 - celery's Consumer
        super().__init__(parent, **kwargs)
        self.watchdog: Watchdog | None = None
        seconds = stall_seconds()
        app = parent.app
        if seconds <= 0 or not app.conf.broker_url or not app.conf.broker_url.startswith(("redis", "rediss", "unix")):
            return
        import redis

        queues = sorted(app.amqp.queues.consume_from) or [app.conf.task_default_queue]
        keys = redis_list_keys(queues)
        client = redis.Redis.from_url(app.conf.broker_url, socket_timeout=5, socket_connect_timeout=5)
        self.watchdog = Watchdog(seconds, lambda: oldest_messages(client, keys), worker_holds_tasks,
                                 end_stalled_worker)
        threading.Thread(target=self.watchdog.run, name="consumer-watchdog", daemon=True).start()
        logger.info("worker watchdog: watching queues %s; a consumer idle for %.0f s while they hold messages "
                    "ends the worker", ", ".join(queues), seconds)

    def shutdown(self, parent) -> None:  # noqa: ANN001
        if self.watchdog is not None:
            self.watchdog.stopped.set()
