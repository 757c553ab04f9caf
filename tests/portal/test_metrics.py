"""/metrics: access by token or address, and the numbers it exposes."""

from __future__ import annotations

from datetime import timedelta

import pytest
from prometheus_client.parser import text_string_to_metric_families

from portal import metrics
from scheduler import cycle_metrics

pytestmark = pytest.mark.django_db


def samples(body: bytes) -> dict[tuple[str, tuple], float]:
    out = {}
    for family in text_string_to_metric_families(body.decode()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


@pytest.fixture
def cycle_key(settings, redis_url):  # noqa: ANN001
    """The cycle histogram in the test Redis, empty before and after."""
    import redis

    settings.REDIS_URL = redis_url
    cycle_metrics._redis_client = None
    client = redis.Redis.from_url(redis_url)
    client.delete(cycle_metrics.CYCLE_KEY)
    yield client
    client.delete(cycle_metrics.CYCLE_KEY)
    cycle_metrics._redis_client = None


# --- Access ----------------------------------------------------------------------------


def test_metrics_are_refused_when_nothing_is_configured(client, settings):
    settings.METRICS_TOKEN = None
    settings.METRICS_ALLOWED_IPS = []
    response = client.get("/metrics")
    assert response.status_code == 403
    assert b"METRICS_TOKEN" in response.content


@pytest.mark.parametrize("token", [None, "s3cret-token"])
def test_a_staff_session_reads_the_metrics_and_a_user_session_does_not(client, settings, django_user_model, token):
    settings.METRICS_TOKEN = token
    settings.METRICS_ALLOWED_IPS = []
    user = django_user_model.objects.create_user("ursula", password="pw")
    client.force_login(user)
    assert client.get("/metrics").status_code == (401 if token else 403)
    django_user_model.objects.filter(pk=user.pk).update(is_staff=True)
    ok = client.get("/metrics")
    assert ok.status_code == 200 and b"gpusched_jobs" in ok.content
    django_user_model.objects.filter(pk=user.pk).update(is_active=False)  # a disabled account is logged out
    assert client.get("/metrics").status_code in (401, 403)


def test_metrics_need_the_right_bearer_token(client, settings):
    settings.METRICS_TOKEN = "s3cret-token"
    settings.METRICS_ALLOWED_IPS = []
    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 401
    ok = client.get("/metrics", HTTP_AUTHORIZATION="Bearer s3cret-token")
    assert ok.status_code == 200 and ok["Content-Type"].startswith("text/plain")


def test_metrics_allowed_from_configured_networks_only(client, settings):
    settings.METRICS_TOKEN = None
    settings.METRICS_ALLOWED_IPS = ["10.0.0.0/8", "192.168.1.5"]
    assert client.get("/metrics", REMOTE_ADDR="10.1.2.3").status_code == 200
    assert client.get("/metrics", REMOTE_ADDR="192.168.1.5").status_code == 200
    assert client.get("/metrics", REMOTE_ADDR="192.168.1.6").status_code == 403
    assert client.get("/metrics", REMOTE_ADDR="::ffff:10.1.2.3").status_code == 200


def test_bad_allowed_ips_setting_names_the_variable():
    from django.core.exceptions import ImproperlyConfigured

    with pytest.raises(ValueError, match="'10.0.0.300'"):
        metrics.parse_networks(["10.0.0.300"])
    import subprocess
    import sys
    from pathlib import Path

    result = subprocess.run(
        [sys.executable, "-c", "import portal.settings"],
        env={"METRICS_ALLOWED_IPS": "10.0.0.0/8,nonsense", "SECRET_KEY": "x", "PATH": "/usr/bin:/bin"},
        capture_output=True, text=True, cwd=Path(__file__).resolve().parents[3],
    )
    assert result.returncode != 0 and "METRICS_ALLOWED_IPS" in result.stderr and ImproperlyConfigured.__name__ in result.stderr


# --- Content -----------------------------------------------------------------------------


def test_metrics_expose_queue_jobs_gpus_latency_and_preemptions(client, settings, roles, make_job, make_node):
    from django.utils import timezone

    from cluster.models import Gpu
    from scheduler.models import Attempt, AttemptState, Job, JobState

    settings.METRICS_TOKEN = "t"
    make_node("n1", 4)
    te = make_job(roles.owner, state=JobState.RUNNING, job_class="TE")
    be = make_job(roles.other, state=JobState.RUNNING, job_class="BE", num_gpus=2)
    Gpu.objects.filter(node__name="n1", index=0).update(allocated_to=te)
    Gpu.objects.filter(node__name="n1", index__in=[1, 2]).update(allocated_to=be)
    make_job(roles.owner, job_class="TE", pending_reason="Resources")
    make_job(roles.owner, job_class="BE", pending_reason="Resources")
    make_job(roles.other, job_class="BE", pending_reason="QuotaExceeded")
    make_job(roles.other, job_class="BE")
    now = timezone.now()
    Job.objects.filter(pk=te.pk).update(submitted_at=now - timedelta(seconds=0.4), first_started_at=now)
    Job.objects.filter(pk=be.pk).update(submitted_at=now - timedelta(seconds=120), first_started_at=now)
    Attempt.objects.filter(job=be).update(state=AttemptState.PREEMPTED, checkpointed=True, lost_gpu_seconds=30.0)
    Attempt.objects.create(job=be, number=2, state=AttemptState.PREEMPTED, checkpointed=False, lost_gpu_seconds=90.0)

    s = samples(client.get("/metrics", HTTP_AUTHORIZATION="Bearer t").content)
    assert s[("gpusched_queue_length", (("job_class", "TE"), ("reason", "Resources")))] == 1
    assert s[("gpusched_queue_length", (("job_class", "BE"), ("reason", "Resources")))] == 1
    assert s[("gpusched_queue_length", (("job_class", "BE"), ("reason", "QuotaExceeded")))] == 1
    assert s[("gpusched_queue_length", (("job_class", "BE"), ("reason", "none")))] == 1
    assert s[("gpusched_running_jobs", (("job_class", "TE"),))] == 1
    assert s[("gpusched_running_jobs", (("job_class", "BE"),))] == 1
    assert s[("gpusched_gpus", (("state", "allocated"),))] == 3
    assert s[("gpusched_gpus", (("state", "free"),))] == 1
    assert s[("gpusched_gpus_allocated", (("job_class", "BE"),))] == 2
    assert s[("gpusched_nodes", (("state", "UP"),))] == 1
    te_le = lambda le: s[("gpusched_submit_to_start_seconds_bucket", (("job_class", "TE"), ("le", le)))]  # noqa: E731
    be_le = lambda le: s[("gpusched_submit_to_start_seconds_bucket", (("job_class", "BE"), ("le", le)))]  # noqa: E731
    assert (te_le("0.25"), te_le("0.5"), te_le("+Inf")) == (0, 1, 1)
    assert (be_le("60.0"), be_le("300.0")) == (0, 1)
    assert s[("gpusched_submit_to_start_seconds_count", (("job_class", "BE"),))] == 1
    assert s[("gpusched_submit_to_start_seconds_sum", (("job_class", "BE"),))] == pytest.approx(120.0)
    assert s[("gpusched_preemptions_total", (("job_class", "BE"),))] == 2
    assert s[("gpusched_preemptions_checkpointed_total", (("job_class", "BE"),))] == 1
    assert s[("gpusched_preemption_lost_gpu_seconds_total", (("job_class", "BE"),))] == pytest.approx(120.0)
    assert s[("gpusched_preemptions_total", (("job_class", "TE"),))] == 0


def test_cycle_durations_recorded_by_the_loop_appear_as_a_histogram(client, settings, cycle_key):
    settings.METRICS_TOKEN = "t"
    assert cycle_metrics.record_cycle_duration(0.003)
    assert cycle_metrics.record_cycle_duration(0.2)
    assert cycle_metrics.record_cycle_duration(12.0)
    assert not cycle_metrics.record_cycle_duration(-1)
    assert not cycle_metrics.record_cycle_duration("fast")
    s = samples(client.get("/metrics", HTTP_AUTHORIZATION="Bearer t").content)
    bucket = lambda le: s[("gpusched_scheduling_cycle_seconds_bucket", (("le", le),))]  # noqa: E731
    assert (bucket("0.005"), bucket("0.25"), bucket("10.0"), bucket("30.0"), bucket("+Inf")) == (1, 2, 2, 3, 3)
    assert s[("gpusched_scheduling_cycle_seconds_count", ())] == 3
    assert s[("gpusched_scheduling_cycle_seconds_sum", ())] == pytest.approx(12.203)


def test_recording_never_raises_when_redis_is_down(settings, caplog):
    settings.REDIS_URL = "redis://127.0.0.1:1/0"
    cycle_metrics._redis_client = None
    try:
        assert cycle_metrics.record_cycle_duration(0.1) is False
        assert "not recorded" in caplog.text
        body, _ = metrics.exposition()  # the scrape still answers, without the cycle histogram
        assert b"gpusched_queue_length" in body and b"gpusched_scheduling_cycle_seconds" not in body
    finally:
        cycle_metrics._redis_client = None
