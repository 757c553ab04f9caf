"""Announcements of changes the live pages show: the writers below the web face call these.

The scheduling loop and the agent-report services must not import the web
face, yet the browser should hear about what they change. They announce it
here; a publisher subscribes when Django starts (the dashboard app's
``ready`` subscribes ``portal.realtime``) and turns each announcement into a
live-update hint. With no publisher subscribed an announcement does nothing.

A publisher is any object with the six methods of :class:`Publisher`; each
is looked up on every call, so a publisher's functions may be replaced after
it subscribed. Publishers must not raise (``portal.realtime`` never does) and
must be safe inside a transaction.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol


class Publisher(Protocol):
    def publish_job_changed(self, job: Any) -> None: ...

    def publish_jobs_changed(self, job_ids: Iterable[int]) -> None: ...

    def publish_job_submitted(self, job: Any) -> None: ...

    def publish_cluster_changed(self) -> None: ...

    def publish_job_progress(self, job_id: int) -> None: ...

    def publish_forecasts_changed(self, job_ids: list[int]) -> None: ...


_publishers: list[Publisher] = []


def subscribe(publisher: Publisher) -> None:
    """Send every later announcement to ``publisher`` too (idempotent)."""
    if not any(p is publisher for p in _publishers):
        _publishers.append(publisher)


def job_changed(job: Any) -> None:
    """A job's state, reason, attempts or ledger changed (``job``: a Job or its id)."""
    for publisher in _publishers:
        publisher.publish_job_changed(job)


def jobs_changed(job_ids: Iterable[int]) -> None:
    """Many jobs changed at once (a cycle's transitions or pending reasons): one call per
    publisher, where one per job made announcing 50,000 reasons cost most of a second."""
    ids = [int(j) for j in job_ids]
    if not ids:
        return
    for publisher in _publishers:
        publisher.publish_jobs_changed(ids)


def job_submitted(job: Any) -> None:
    """A job entered the queue (``job``: a Job or its id)."""
    for publisher in _publishers:
        publisher.publish_job_submitted(job)


def cluster_changed() -> None:
    """Nodes or GPUs changed in a way that is not a job transition."""
    for publisher in _publishers:
        publisher.publish_cluster_changed()


def job_progress(job_id: int) -> None:
    """A running job reported progress (step, metrics, checkpoint)."""
    for publisher in _publishers:
        publisher.publish_job_progress(job_id)


def forecasts_changed(job_ids: list[int]) -> None:
    """The start-time forecasts or queue positions of these jobs changed."""
    for publisher in _publishers:
        publisher.publish_forecasts_changed(job_ids)
