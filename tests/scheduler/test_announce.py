"""scheduler.announce: what the loop and the agent services announce reaches every subscribed publisher."""

from __future__ import annotations

import pytest

from scheduler import announce


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def publish_job_changed(self, job: object) -> None:
        self.calls.append(("job", job))

    def publish_jobs_changed(self, job_ids: list[int]) -> None:
        self.calls.append(("jobs", tuple(job_ids)))

    def publish_job_submitted(self, job: object) -> None:
        self.calls.append(("submitted", job))

    def publish_cluster_changed(self) -> None:
        self.calls.append(("cluster",))

    def publish_job_progress(self, job_id: int) -> None:
        self.calls.append(("progress", job_id))

    def publish_forecasts_changed(self, job_ids: list[int]) -> None:
        self.calls.append(("forecasts", tuple(job_ids)))


@pytest.fixture
def publishers(monkeypatch) -> list:  # noqa: ANN001
    """No publisher subscribed (Django's start-up subscribes portal.realtime; it is set aside here)."""
    subscribed: list = []
    monkeypatch.setattr(announce, "_publishers", subscribed)
    return subscribed


def test_with_no_publisher_an_announcement_does_nothing(publishers) -> None:  # noqa: ANN001
    announce.job_changed(1)
    announce.job_submitted(2)
    announce.cluster_changed()
    assert publishers == []


def test_every_subscribed_publisher_hears_each_announcement_once(publishers) -> None:  # noqa: ANN001
    first, second = Recorder(), Recorder()
    announce.subscribe(first)
    announce.subscribe(second)
    announce.subscribe(first)  # subscribing twice changes nothing
    announce.job_changed(7)
    announce.jobs_changed(iter([1, 2]))
    announce.jobs_changed([])  # nothing changed: nobody is told
    announce.job_submitted(8)
    announce.cluster_changed()
    announce.job_progress(9)
    announce.forecasts_changed([4, 5])
    assert first.calls == second.calls == [("job", 7), ("jobs", (1, 2)), ("submitted", 8), ("cluster",),
                                           ("progress", 9), ("forecasts", (4, 5))]


def test_a_publisher_method_replaced_after_subscribing_is_the_one_called(publishers) -> None:  # noqa: ANN001
    recorder = Recorder()
    announce.subscribe(recorder)
    replaced: list[object] = []
    recorder.publish_job_changed = replaced.append
    announce.job_changed(3)
    assert replaced == [3] and recorder.calls == []


def test_django_start_up_subscribes_the_live_update_publisher() -> None:
    import django
    from django.conf import settings

    if not settings.configured:
        pytest.skip("Django is not configured in this run")
    django.setup()
    from portal import realtime

    assert any(p is realtime for p in announce._publishers)
