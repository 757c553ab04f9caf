"""The simulation page: validation (the wrong line of a trace), the run as a task, results and downloads."""

from __future__ import annotations

import json
from unittest import mock

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from portal.dashboard import simulation
from portal.dashboard.models import RunState, SimulationRun

pytestmark = pytest.mark.django_db

GOOD_TRACE = (
    "job_id,submit_time,duration,num_gpus,job_class,grace_period\n"
    + "".join(f"be{i},{i * 30},{3600 + 60 * i},4,BE,30\n" for i in range(8))
    + "".join(f"te{i},{600 + i * 45},{120 + 10 * i},1,TE,0\n" for i in range(12))
)


def synthetic_form(**overrides: object) -> dict:
    data = {"workload": "synthetic", "policies": ["fifo", "fitgpp"], "nodes": 2, "gpus_per_node": 8,
            "resume_overhead": 30, "seed": 3, "jobs": 80, "load": 1.2, "te_share": 0.4}
    data.update(overrides)
    return data


def trace_form(text: str, name: str = "mine.csv", **overrides: object) -> dict:
    data = synthetic_form(workload="trace", trace=SimpleUploadedFile(name, text.encode(), content_type="text/csv"))
    for key in ("seed", "jobs", "load", "te_share"):
        data.pop(key)
    data.update(overrides)
    return data


@pytest.fixture
def sent_tasks():
    """Messages the broker would have received (the broker is not needed for these tests)."""
    with mock.patch("portal.celery.app.send_task") as send:
        yield send


# --- Validation ----------------------------------------------------------------------


def test_a_bad_trace_row_is_refused_with_its_line(browser_as, roles, sent_tasks, django_capture_on_commit_callbacks):
    bad = GOOD_TRACE.replace("te3,735,150,1,TE,0", "te3,735,-5,1,TE,0")
    line = GOOD_TRACE.splitlines().index("te3,735,150,1,TE,0") + 1
    with django_capture_on_commit_callbacks(execute=True):
        response = browser_as(roles.owner).post("/simulations/", trace_form(bad))
    assert response.status_code == 400
    html = response.content.decode()
    assert f"Line {line}, column &#x27;duration&#x27;" in html
    assert "The line: &quot;te3,735,-5,1,TE,0&quot;" in html
    assert SimulationRun.objects.count() == 0 and not sent_tasks.called


@pytest.mark.parametrize(("text", "expected"), [
    ("job_id,submit_time,duration,num_gpus\n", "Line 1, column &#x27;job_class&#x27;: missing required column"),
    ("", "The submitted file is empty."),
    ("job_id,submit_time,duration,num_gpus,job_class\n", "header but no job"),
    ("job_id,submit_time,duration,num_gpus,job_class\na,0,10,1,XX\n", "Line 2, column &#x27;job_class&#x27;"),
    ("job_id,submit_time,duration,num_gpus,job_class\na,0,10,1,TE\na,5,10,1,TE\n", "duplicate id"),
])
def test_malformed_traces_are_refused(browser_as, roles, sent_tasks, text, expected):
    response = browser_as(roles.owner).post("/simulations/", trace_form(text))
    assert response.status_code == 400
    assert expected in response.content.decode()
    assert SimulationRun.objects.count() == 0


def test_non_utf8_trace_is_refused_with_the_line(browser_as, roles, sent_tasks):
    upload = SimpleUploadedFile("x.csv", b"job_id,submit_time,duration,num_gpus,job_class\na,0,10,1,TE\n\xff\xfe,1\n")
    data = trace_form("")
    data["trace"] = upload
    response = browser_as(roles.owner).post("/simulations/", data)
    assert response.status_code == 400 and "Line 3: not UTF-8 text" in response.content.decode()


def test_a_trace_larger_than_the_cluster_is_refused_on_the_cluster_field(browser_as, roles, sent_tasks):
    response = browser_as(roles.owner).post("/simulations/", trace_form(GOOD_TRACE, nodes=1, gpus_per_node=2))
    assert response.status_code == 400
    assert "smaller than the largest job" in response.content.decode()


def test_synthetic_fields_are_required_and_bounded(browser_as, roles, settings, sent_tasks):
    settings.SIMULATION_MAX_JOBS = 100
    response = browser_as(roles.owner).post("/simulations/", synthetic_form(jobs=101, load="", policies=[]))
    html = response.content.decode()
    assert response.status_code == 400
    assert "At most 100 jobs." in html and "Required for a synthetic workload." in html
    assert "This field is required." in html  # no policy chosen
    assert SimulationRun.objects.count() == 0


def test_too_many_active_runs_are_refused(browser_as, roles, settings, sent_tasks):
    settings.SIMULATION_MAX_ACTIVE_RUNS = 1
    client = browser_as(roles.owner)
    assert client.post("/simulations/", synthetic_form()).status_code == 302
    response = client.post("/simulations/", synthetic_form())
    assert response.status_code == 400 and "the limit is 1" in response.content.decode()
    assert SimulationRun.objects.count() == 1


# --- Running ------------------------------------------------------------------------------


def test_submission_queues_the_task_after_commit(browser_as, roles, sent_tasks, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        response = browser_as(roles.owner).post("/simulations/", synthetic_form())
    run = SimulationRun.objects.get()
    assert response.status_code == 302 and response.url == f"/simulations/{run.pk}/"
    assert run.state == RunState.QUEUED and run.params["cluster"] == "2x8"
    assert run.params["synthetic"] == {"seed": 3, "jobs": 80, "load": 1.2, "te_share": 0.4}
    sent_tasks.assert_called_once()
    assert sent_tasks.call_args.args == (simulation.RUN_TASK,)
    assert sent_tasks.call_args.kwargs["args"] == [run.pk]


def test_unreachable_broker_fails_the_run_with_a_reason(roles):
    with mock.patch("portal.celery.app.send_task", side_effect=ConnectionError("refused")):
        run = SimulationRun.objects.create(owner=roles.owner, workload_kind="synthetic", params={})
        assert simulation.enqueue(run.pk) is False
    run.refresh_from_db()
    assert run.state == RunState.FAILED and "task queue could not be reached" in run.error


def make_run(owner, client_post, form) -> SimulationRun:  # noqa: ANN001
    with mock.patch("portal.celery.app.send_task"):
        assert client_post("/simulations/", form).status_code == 302
    return SimulationRun.objects.latest("id")


def test_a_synthetic_run_executes_with_progress_and_stores_comparable_results(browser_as, roles):
    client = browser_as(roles.owner)
    run = make_run(roles.owner, client.post, synthetic_form())
    assert simulation.execute_run(run.pk) == RunState.SUCCEEDED
    assert simulation.execute_run(run.pk) is None  # a second delivery of the task does nothing
    run.refresh_from_db()
    assert run.state == RunState.SUCCEEDED and run.error == ""
    assert [r["policy"] for r in run.results] == ["fifo", "fitgpp"]
    assert all(r["jobs"] == 80 for r in run.results)
    assert run.progress_total == 160 and run.progress_done == 160
    assert "synthetic" in run.workload_label
    assert len(run.figure["data"]) >= 4 and "fitgpp" in run.table

    status = client.get(f"/simulations/{run.pk}/status/").json()
    assert status["state"] == "SUCCEEDED" and not status["active"] and status["fraction"] == 1.0
    assert [row["policy"] for row in status["summary"]] == ["fifo", "fitgpp"]
    assert status["summary"][0]["baseline"] is True

    download = client.get(f"/simulations/{run.pk}/results.json")
    assert download["Content-Disposition"] == f'attachment; filename="simulation-{run.pk}.json"'
    assert json.loads(download.content) == run.results

    report = client.get(f"/simulations/{run.pk}/report.html")
    html = report.content.decode()
    assert report["Content-Disposition"] == f'attachment; filename="simulation-{run.pk}.html"'
    assert "plotly.js v" in html and "<script src=" not in html  # self-contained, no network
    assert json.dumps(run.results[1]["policy"]) in html


def test_a_policy_with_nothing_to_resize_in_the_workload_is_said_to_have_run_the_jobs_as_asked(browser_as, roles):
    client = browser_as(roles.owner)
    run = make_run(roles.owner, client.post, synthetic_form(policies=["fitgpp", "pollux", "rubick"], jobs=30))
    assert simulation.execute_run(run.pk) == RunState.SUCCEEDED
    run.refresh_from_db()
    notes = {r["policy"]: r.get("notes", []) for r in run.results}
    assert notes["fitgpp"] == []
    assert notes["pollux"][0].startswith("pollux resizes only adaptive jobs")
    assert notes["rubick"][0].startswith("rubick resizes only reconfigurable jobs")
    status = client.get(f"/simulations/{run.pk}/status/").json()
    assert status["notes"] == notes["pollux"] + notes["rubick"]
    page = client.get(f"/simulations/{run.pk}/").content.decode()
    assert 'id="run-notes"' in page


def test_an_uploaded_trace_runs_as_uploaded(browser_as, roles):
    client = browser_as(roles.owner)
    run = make_run(roles.owner, client.post, trace_form(GOOD_TRACE, name="lab-week.csv", policies=["fifo"]))
    assert run.trace_text == GOOD_TRACE and run.trace_name == "lab-week.csv"
    assert simulation.execute_run(run.pk) == RunState.SUCCEEDED
    run.refresh_from_db()
    assert run.results[0]["jobs"] == 20
    assert run.results[0]["classes"]["TE"]["count"] == 12
    assert "lab-week.csv" in run.workload_label


def test_a_run_that_raises_fails_with_the_reason(roles):
    run = SimulationRun.objects.create(owner=roles.owner, workload_kind="synthetic",
                                       params={"policies": ["no-such-policy"], "cluster": "1x8",
                                               "synthetic": {"jobs": 5, "seed": 0, "load": 1.0, "te_share": 0.5}})
    assert simulation.execute_run(run.pk) == RunState.FAILED
    run.refresh_from_db()
    assert run.state == RunState.FAILED and "no-such-policy" in run.error and run.results is None


def test_a_run_whose_worker_died_fails_and_frees_its_owners_place(browser_as, roles, settings, sent_tasks):
    """A RUNNING run silent for STALE_AFTER_S lost its worker: its page says so, and it no longer counts
    against the owner's limit of active runs. A run that still writes progress is left alone."""
    from datetime import timedelta

    from django.utils import timezone

    settings.SIMULATION_MAX_ACTIVE_RUNS = 2
    client = browser_as(roles.owner)
    now = timezone.now()
    dead, alive = (SimulationRun.objects.create(owner=roles.owner, workload_kind="synthetic", params={},
                                                state=RunState.RUNNING, started_at=now - timedelta(hours=1))
                   for _ in range(2))
    SimulationRun.objects.filter(pk=dead.pk).update(alive_at=now - timedelta(seconds=simulation.STALE_AFTER_S + 5))
    SimulationRun.objects.filter(pk=alive.pk).update(alive_at=now - timedelta(seconds=5))
    status = client.get(f"/simulations/{dead.pk}/status/").json()
    assert status["state"] == RunState.FAILED and "worker running this simulation stopped" in status["error"]
    assert client.get(f"/simulations/{alive.pk}/status/").json()["state"] == RunState.RUNNING
    assert client.post("/simulations/", synthetic_form()).status_code == 302  # the dead run's place is free


def test_a_late_worker_does_not_overwrite_the_failure_of_its_run(roles):
    """A worker that comes back after its run was declared stale leaves the verdict: the run stays FAILED."""
    run = SimulationRun.objects.create(owner=roles.owner, workload_kind="synthetic",
                                       params={"policies": ["fifo"], "cluster": "1x8",
                                               "synthetic": {"jobs": 5, "seed": 0, "load": 1.0, "te_share": 0.5}})
    from scheduler.sim.runner import run_all

    def stale_meanwhile(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        out = run_all(*args, **kwargs)
        SimulationRun.objects.filter(pk=run.pk).update(state=RunState.FAILED, error="stale")
        return out

    with mock.patch("scheduler.sim.runner.run_all", stale_meanwhile):  # execute_run imports it when it runs
        assert simulation.execute_run(run.pk) is None
    run.refresh_from_db()
    assert (run.state, run.error, run.results) == (RunState.FAILED, "stale", None)


def test_the_celery_task_is_registered_under_its_name():
    from portal.celery import app

    import portal.dashboard.tasks  # noqa: F401 - autodiscovery imports it in a worker

    assert simulation.RUN_TASK in app.tasks


# --- Visibility ----------------------------------------------------------------------


def test_runs_are_private_to_their_owner_and_staff(browser_as, roles):
    run = SimulationRun.objects.create(owner=roles.owner, workload_kind="synthetic", params={"policies": ["fifo"]},
                                       state=RunState.SUCCEEDED, results=[], figure={"data": [], "layout": {}})
    for path in ("", "status/", "results.json", "report.html"):
        assert browser_as(roles.other).get(f"/simulations/{run.pk}/{path}").status_code == 404
        assert browser_as(roles.staff).get(f"/simulations/{run.pk}/{path}").status_code == 200
    assert f"/simulations/{run.pk}/" not in browser_as(roles.other).get("/simulations/").content.decode()
    assert f"/simulations/{run.pk}/" in browser_as(roles.owner).get("/simulations/").content.decode()


def test_downloads_of_an_unfinished_run_are_404(browser_as, roles):
    run = SimulationRun.objects.create(owner=roles.owner, workload_kind="synthetic", params={})
    assert browser_as(roles.owner).get(f"/simulations/{run.pk}/results.json").status_code == 404
    assert browser_as(roles.owner).get(f"/simulations/{run.pk}/status/").json()["active"] is True
