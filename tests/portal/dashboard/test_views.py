"""Dashboard pages through the Django test client: login required, visibility, content, static plotly.js."""

from __future__ import annotations

import json
import re

import pytest

from tests.support.web import remote_assets

pytestmark = pytest.mark.django_db

PAGES = ["/cluster/", "/latency/", "/simulations/"]


def initial_state(response) -> dict:  # noqa: ANN001
    match = re.search(r'<script id="initial-state" type="application/json">(.*?)</script>', response.content.decode(), re.S)
    assert match, "the page embeds its first state"
    return json.loads(match.group(1))


@pytest.mark.parametrize("path", PAGES)
def test_every_page_needs_a_login(browser_as, path):
    response = browser_as(None).get(path)
    assert response.status_code == 302 and response.url.startswith("/accounts/login/")


@pytest.mark.parametrize("path", PAGES)
def test_pages_render_for_a_user_and_load_plotly_locally(browser_as, roles, path):
    response = browser_as(roles.owner).get(path)
    assert response.status_code == 200
    html = response.content.decode()
    assert remote_assets(html) == []
    if path != "/simulations/":
        assert "/static/dashboard/vendor/plotly.min.js" in html


def test_plotly_js_is_served_from_the_package(client):
    from portal.dashboard.staticfinders import plotly_js_path

    response = client.get("/static/dashboard/vendor/plotly.min.js")
    assert response.status_code == 200
    body = b"".join(response.streaming_content)
    assert body == plotly_js_path().read_bytes()
    assert body.startswith(b"/**\n* plotly.js v")


def test_cluster_page_shows_others_jobs_without_their_command(browser_as, roles, make_job, make_node):
    from cluster.models import Gpu
    from scheduler.models import JobState

    make_node("gpu-a", 2)
    theirs = make_job(roles.other, state=JobState.RUNNING, name="bobs-training", command="python secret_bob.py")
    Gpu.objects.filter(node__name="gpu-a", index=0).update(allocated_to=theirs)
    response = browser_as(roles.owner).get("/cluster/")
    assert "secret_bob" not in response.content.decode()
    state = initial_state(response)
    holder = state["jobs"][str(state["nodes"][0]["gpus"][0]["job_id"])]
    assert holder["name"] == "bobs-training" and holder["owner"] == "bob" and holder["url"] is None
    staff_state = initial_state(browser_as(roles.staff).get("/cluster/"))
    assert staff_state["jobs"][str(theirs.pk)]["url"] == f"/jobs/{theirs.pk}/"


def test_latency_page_window_falls_back_to_the_default_on_a_bad_value(browser_as, roles):
    from portal.dashboard.latency import DEFAULT_LATENCY_WINDOW

    assert initial_state(browser_as(roles.owner).get("/latency/?window=3600"))["window_s"] == 3600
    assert initial_state(browser_as(roles.owner).get("/latency/?window=17"))["window_s"] == DEFAULT_LATENCY_WINDOW
    assert initial_state(browser_as(roles.owner).get("/latency/?window=abc"))["window_s"] == DEFAULT_LATENCY_WINDOW


def test_job_page_carries_the_live_script_with_its_urls(browser_as, roles, make_job):
    job = make_job(roles.owner)
    html = browser_as(roles.owner).get(f"/jobs/{job.pk}/").content.decode()
    assert f'data-job-id="{job.pk}"' in html
    assert f'data-cancel-api-url="/api/v1/jobs/{job.pk}/cancel/"' in html
    assert "/static/dashboard/job.js" in html


def test_navigation_links_to_the_dashboard(browser_as, roles):
    html = browser_as(roles.owner).get("/jobs/").content.decode()
    for path in PAGES:
        assert f'href="{path}"' in html


def test_collectstatic_copies_plotly_js_from_the_package(settings, tmp_path):
    from django.contrib.staticfiles import finders
    from django.core.management import call_command

    from portal.dashboard.staticfinders import plotly_js_path

    settings.STATIC_ROOT = tmp_path
    settings.STORAGES = {**settings.STORAGES,
                         "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"}}
    finders.get_finder.cache_clear()
    call_command("collectstatic", interactive=False, verbosity=0)
    copied = tmp_path / "dashboard" / "vendor" / "plotly.min.js"
    assert copied.read_bytes() == plotly_js_path().read_bytes()
    assert (tmp_path / "dashboard" / "cluster.js").exists()


@pytest.mark.parametrize("scale", [1, 4])
def test_live_state_reads_take_a_fixed_number_of_queries(roles, make_job, make_node, django_assert_num_queries, scale,
                                                         monkeypatch):
    """The pages and /metrics are refreshed on every push: their cost must not grow with the cluster."""
    from cluster.models import Gpu
    from portal.dashboard import latency, metrics_state, selectors
    from scheduler import forecast_store
    from scheduler.models import JobState

    # Queue heads another test's forecasts left in Redis would name jobs of this database to list first.
    monkeypatch.setattr(forecast_store, "read_heads", lambda: {})

    for n in range(scale):
        make_node(f"n{n}", 4)
        running = make_job(roles.other, state=JobState.RUNNING, num_gpus=2)
        Gpu.objects.filter(node__name=f"n{n}", index__in=[0, 1]).update(allocated_to=running)
        make_job(roles.owner, state=JobState.COMPLETED)
        make_job(roles.owner, job_class="TE")
        make_job(roles.other)
    with django_assert_num_queries(9):  # the GPUs, then the jobs holding them once each
        selectors.cluster_state(roles.owner)
    with django_assert_num_queries(9):
        latency.latency_stats()
    with django_assert_num_queries(8):  # the first scrape of a process also counts the settled history
        metrics_state.metrics_state()
    with django_assert_num_queries(7):
        metrics_state.metrics_state()


def test_a_node_of_mixed_gpus_names_each_gpus_model(roles, make_node):  # noqa: ANN001
    from cluster.models import Gpu
    from portal.dashboard import selectors

    make_node("mixed", 2)
    Gpu.objects.filter(node__name="mixed", index=1).update(model_name="H100")
    node = selectors.cluster_state(roles.owner)["nodes"][0]
    assert "model" not in node and [g["model"] for g in node["gpus"]] == ["Virtual GPU", "H100"]


def test_the_grid_shows_an_unhealthy_gpu_out_of_service_and_metrics_count_it_unavailable(roles, make_node):  # noqa: ANN001
    from django.utils import timezone

    from cluster import gpu_health
    from portal.dashboard import metrics_state, selectors

    make_node("n1", 2)
    gpu_health.mark_unhealthy("n1", 1, "Xid 79", timezone.now())
    node = selectors.cluster_state(roles.owner)["nodes"][0]
    assert [(g["status"], g.get("healthy", True), g.get("unhealthy_reason", "")) for g in node["gpus"]] == [
        ("free", True, ""), ("unhealthy", False, "Xid 79")]
    assert node["model"] == "Virtual GPU" and "model" not in node["gpus"][0]  # once per node of one model
    assert node["free"] == 1
    assert metrics_state.metrics_state().gpus == {"allocated": 0, "free": 1, "unavailable": 1}
