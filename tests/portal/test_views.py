"""Browser pages: login, the submission form, my jobs, job detail, cancel; phone-friendly, no CDN."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.test import Client

from scheduler.models import Attempt, AttemptLog, Job, JobState

pytestmark = pytest.mark.django_db

FORM = {"name": "notebook", "command": "python explore.py", "job_class": "TE", "num_gpus": "1",
        "num_cpus": "", "mem_gb": "", "grace_period": "", "time_limit": "", "priority": ""}


def test_login_and_logout_through_the_pages(roles, password) -> None:
    client = Client()
    page = client.get("/jobs/", follow=True)
    assert page.redirect_chain[-1][0].startswith("/accounts/login/?next=/jobs/")
    bad = client.post("/accounts/login/", {"username": "alice", "password": "wrong"})
    assert bad.status_code == 200 and bad.context["form"].non_field_errors()
    good = client.post("/accounts/login/", {"username": "alice", "password": password, "next": "/jobs/"})
    assert good.status_code == 302 and good["Location"] == "/jobs/"
    assert client.get("/jobs/").status_code == 200
    assert client.get("/accounts/logout/").status_code == 405  # logging out is a POST
    assert client.post("/accounts/logout/").status_code == 302
    assert client.get("/jobs/").status_code == 302


def test_form_submission_creates_the_job_and_shows_it(roles, browser_as) -> None:
    client = browser_as(roles.owner)
    response = client.post("/jobs/new/", FORM)
    job = Job.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/jobs/{job.pk}/"
    assert (job.owner, job.job_class, job.num_gpus, job.grace_period, job.priority) == (roles.owner, "TE", 1, 30, 0)
    detail = client.get(response["Location"]).content.decode()
    assert f"Job {job.pk} submitted." in detail and "python explore.py" in detail


@pytest.mark.parametrize("change, field", [
    ({"num_gpus": "0"}, "num_gpus"),
    ({"num_gpus": "-2"}, "num_gpus"),
    ({"num_gpus": "100000"}, "num_gpus"),
    ({"num_gpus": "two"}, "num_gpus"),
    ({"job_class": "XL"}, "job_class"),
    ({"command": "   "}, "command"),
    ({"name": ""}, "name"),
    ({"time_limit": "0"}, "time_limit"),
    ({"grace_period": "-5"}, "grace_period"),
    ({"grace_period": "2d"}, "grace_period"),
    ({"time_limit": "banana"}, "time_limit"),
    ({"time_limit": "1:99"}, "time_limit"),
    ({"time_limit": "9" * 40}, "time_limit"),
    ({"mem_gb": "lots"}, "mem_gb"),
])
def test_form_errors_appear_next_to_their_field_and_nothing_is_written(roles, browser_as, change, field) -> None:
    response = browser_as(roles.owner).post("/jobs/new/", {**FORM, **change})
    assert response.status_code == 400
    assert list(response.context["form"].errors) == [field]
    html = response.content.decode()
    # the error list sits inside the field's own block, right after its input
    block = re.search(rf'<div class="field has-error">\s*<label for="id_{field}">.*?</div>', html, re.S)
    assert block and f'id="id_{field}_error"' in block.group(0)
    assert re.search(rf'aria-describedby="[^"]*\bid_{field}_error\b', block.group(0))  # read out with the input
    assert Job.objects.count() == 0


def test_form_takes_durations_as_the_command_line_does(roles, browser_as) -> None:
    client = browser_as(roles.owner)
    for typed, seconds in (("2h", 7200), ("1h30m", 5400), ("01:30:00", 5400), ("1-00:00:00", 86400), ("900", 900)):
        response = client.post("/jobs/new/", {**FORM, "time_limit": typed, "grace_period": "2m"})
        assert response.status_code == 302, typed
        job = Job.objects.order_by("-pk").first()
        assert (job.time_limit, job.grace_period) == (seconds, 120), typed
    shown = client.get(f"/jobs/{job.pk}/").content.decode()  # the last one: 900 s, grace 2 min
    assert "<dt>Grace period</dt><dd>0:02:00 (120 s)</dd>" in shown and "<dt>Time limit</dt><dd>0:15:00 (900 s)</dd>" in shown
    page = client.get("/jobs/new/").content.decode()
    assert re.search(r'<input type="text" name="time_limit"[^>]*placeholder="90, 30m, 2h or 1-00:00:00"', page)
    assert re.search(r'<input type="text" name="grace_period" value="30"', page)  # the default, in seconds


def test_form_duration_errors_say_what_is_accepted_and_keep_what_was_typed(roles, browser_as) -> None:
    response = browser_as(roles.owner).post("/jobs/new/", {**FORM, "time_limit": "2 hours", "grace_period": "-5"})
    errors = response.context["form"].errors
    assert errors["time_limit"] == ["Invalid duration '2 hours': use seconds (90), units (90s, 30m, 2h, 1d, 1h30m) "
                                    "or HH:MM:SS"]
    assert errors["grace_period"] == ["Invalid duration '-5': a duration cannot be negative"]
    too_long = browser_as(roles.owner).post("/jobs/new/", {**FORM, "grace_period": "2d"})
    assert too_long.context["form"].errors["grace_period"] == ["Ensure this value is at most 1-00:00:00 (86400 s)."]
    assert 'value="2 hours"' in response.content.decode()  # what was typed stays in the field
    assert Job.objects.count() == 0


def test_form_error_for_gpus_beyond_the_cluster(roles, browser_as, make_node) -> None:
    make_node("n1", 4)
    response = browser_as(roles.owner).post("/jobs/new/", {**FORM, "num_gpus": "5"})
    assert response.status_code == 400
    assert "largest node has 4" in response.context["form"].errors["num_gpus"][0]
    assert Job.objects.count() == 0


def test_my_jobs_page_filters_and_paginates(roles, browser_as, make_job) -> None:
    for i in range(27):
        make_job(roles.owner, name=f"be-{i}", job_class="BE")
    make_job(roles.owner, JobState.RUNNING, name="te-running", job_class="TE")
    make_job(roles.other, name="bobs-job")
    client = browser_as(roles.owner)
    first = client.get("/jobs/")
    assert first.context["page"].paginator.count == 28 and len(first.context["page"]) == 25
    assert "bobs-job" not in first.content.decode()
    second = client.get("/jobs/?page=2")
    assert len(second.context["page"]) == 3
    running = client.get("/jobs/?state=RUNNING&job_class=TE")
    assert [j.name for j in running.context["page"]] == ["te-running"]
    assert client.get("/jobs/?job_class=BE&page=2").context["page"].paginator.count == 27
    make_job(roles.owner, JobState.COMPLETED, name="done")
    make_job(roles.owner, JobState.FAILED, name="broken")
    assert {j.name for j in client.get("/jobs/?state=ended").context["page"]} == {"done", "broken"}
    live = client.get("/jobs/?state=live&job_class=TE")
    assert [j.name for j in live.context["page"]] == ["te-running"]
    assert client.get("/jobs/?state=live").context["page"].paginator.count == 28  # the waiting ones and the running one
    page_links = re.findall(r'href="\?([^"]+)"', client.get("/jobs/?job_class=BE").content.decode())
    assert page_links == ["job_class=BE&amp;page=2"]


def test_my_jobs_page_shows_the_jobs_active_between_two_days(roles, browser_as, make_job) -> None:
    from datetime import timedelta

    from django.utils import timezone

    now = timezone.now()
    for name, submitted, ended in (("last-month", 40, 30), ("this-week", 6, 2), ("running", 1, None)):
        job = make_job(roles.owner, JobState.COMPLETED if ended else JobState.RUNNING, name=name)
        Job.objects.filter(pk=job.pk).update(submitted_at=now - timedelta(days=submitted),
                                             ended_at=None if ended is None else now - timedelta(days=ended))
    client = browser_as(roles.owner)
    day = lambda n: (now - timedelta(days=n)).date().isoformat()  # noqa: E731

    def listed(query: str) -> set[str]:
        return {j.name for j in client.get(f"/jobs/?{query}").context["page"]}

    assert listed(f"active_from={day(7)}") == {"this-week", "running"}
    assert listed(f"active_from={day(35)}&active_to={day(5)}") == {"last-month", "this-week"}
    page = client.get(f"/jobs/?active_from={day(1)}&active_to={day(3)}")
    assert "Must not be before the first day." in page.content.decode()
    assert 'type="date" name="active_from"' in client.get("/jobs/").content.decode()


def test_staff_see_every_job_with_owner_and_can_filter_by_owner(roles, browser_as, make_job) -> None:
    make_job(roles.owner, name="alices")
    make_job(roles.other, name="bobs")
    page = browser_as(roles.staff).get("/jobs/")
    assert {j.name for j in page.context["page"]} == {"alices", "bobs"} and page.context["show_owner"]
    assert [j.name for j in browser_as(roles.staff).get("/jobs/?owner=bob").context["page"]] == ["bobs"]


def test_detail_shows_timeline_attempts_ledger_and_log(roles, browser_as, make_job) -> None:
    job = make_job(roles.owner, JobState.RUNNING, num_gpus=2)
    attempt = job.attempts.get()
    Attempt.objects.filter(pk=attempt.pk).update(checkpointed=True, lost_gpu_seconds=12.5)
    AttemptLog.objects.create(attempt=attempt, text="epoch 1 loss 0.93")
    html = browser_as(roles.owner).get(f"/jobs/{job.pk}/").content.decode()
    timeline = re.search(r'<ol class="timeline".*?</ol>', html, re.S).group(0)
    assert timeline.index("PENDING") < timeline.index("RUNNING")
    assert "n1: 0,1" in html and "12.5" in html and ">yes<" in html
    assert "epoch 1 loss 0.93" in html
    assert f'action="/jobs/{job.pk}/cancel/"' in html


def test_detail_says_a_cpu_or_memory_request_of_zero_is_no_limit(roles, browser_as, make_job) -> None:
    def resources(job: Job) -> str:
        html = browser_as(roles.owner).get(f"/jobs/{job.pk}/").content.decode()
        return " ".join(re.search(r"<dt>Resources</dt><dd>(.*?)</dd>", html, re.S).group(1).split())

    assert resources(make_job(roles.owner, num_gpus=2)) == "2 GPUs, CPUs not limited, memory not limited"
    assert resources(make_job(roles.owner, num_gpus=1, num_cpus=1.0, mem_gb=7.5)) == "1 GPU, 1 CPU, 7.5 GB of memory"
    assert resources(make_job(roles.owner, num_gpus=1, num_cpus=4.0, mem_gb=16.0)) == "1 GPU, 4 CPUs, 16 GB of memory"


def test_cancel_from_the_page(roles, browser_as, make_job) -> None:
    job = make_job(roles.owner, JobState.RUNNING)
    client = browser_as(roles.owner)
    response = client.post(f"/jobs/{job.pk}/cancel/", follow=True)
    assert f"Job {job.pk} is CANCELLING." in response.content.decode()
    assert Job.objects.get(pk=job.pk).state == JobState.CANCELLING
    finished = make_job(roles.owner, JobState.COMPLETED)
    response = client.post(f"/jobs/{finished.pk}/cancel/", follow=True)
    assert "already finished" in response.content.decode()
    assert 'action="/jobs/%d/cancel/"' % finished.pk not in response.content.decode()


@pytest.mark.parametrize("path", ["/accounts/login/", "/jobs/", "/jobs/new/", "/account/tokens/"])
def test_pages_are_phone_friendly_and_use_only_local_assets(roles, browser_as, path) -> None:
    user = None if path == "/accounts/login/" else roles.owner
    html = browser_as(user).get(path).content.decode()
    assert '<meta name="viewport" content="width=device-width, initial-scale=1">' in html
    assets = re.findall(r'<(?:link|script|img)[^>]+(?:src|href)="([^"]+)"', html)
    assert assets and all(a.startswith("/static/") for a in assets)
    assert "http://" not in html and "https://" not in html


def test_stylesheet_is_served_and_fluid() -> None:
    css = Path(__file__).resolve().parents[2].joinpath("static/portal/site.css").read_text()
    assert "@media" in css and "max-width" in css and "url(" not in css
    assert Client().get("/static/portal/site.css").status_code == 200


def test_an_ended_attempt_with_an_empty_log_says_the_job_printed_nothing(roles, browser_as, make_job) -> None:
    finished = make_job(roles.owner, JobState.COMPLETED)
    running = make_job(roles.owner, JobState.RUNNING)
    client = browser_as(roles.owner)
    finished_html = client.get(f"/jobs/{finished.pk}/").content.decode()
    running_html = client.get(f"/jobs/{running.pk}/").content.decode()
    assert "(the job printed nothing)" in finished_html and "(no output yet)" not in finished_html
    assert "(no output yet)" in running_html and "(the job printed nothing)" not in running_html


def test_pages_link_the_favicon_and_favicon_ico_leads_to_it(roles, browser_as) -> None:
    html = browser_as(roles.owner).get("/jobs/").content.decode()
    icon = re.search(r'<link rel="icon" href="([^"]+)"', html).group(1)
    assert icon == "/static/portal/favicon.ico"
    served = Client().get(icon)
    assert served.status_code == 200 and b"".join(served.streaming_content if served.streaming else [served.content])[:4] == b"\x00\x00\x01\x00"
    moved = Client().get("/favicon.ico")
    assert moved.status_code == 301 and moved["Location"] == icon


def test_detail_renders_progress_once_the_job_reported_and_hides_it_before(roles, browser_as, make_job) -> None:
    from django.utils import timezone

    from jobprogress import services

    job = make_job(roles.owner, JobState.RUNNING)
    client = browser_as(roles.owner)
    assert '<section id="progress-section" hidden>' in client.get(f"/jobs/{job.pk}/").content.decode()
    services.record_progress(job.pk, 1, {"step": 3, "total_steps": 12, "metrics": {"loss": 0.5}}, timezone.now())
    html = client.get(f"/jobs/{job.pk}/").content.decode()
    assert '<section id="progress-section">' in html and 'value="0.250000"' in html
    assert '"step": 3' in html  # the initial state the page script renders


def test_hold_and_release_from_the_page(roles, browser_as, make_job) -> None:
    job = make_job(roles.owner)
    client = browser_as(roles.owner)
    page = client.get(f"/jobs/{job.pk}/").content.decode()
    assert f'action="/jobs/{job.pk}/hold/"' in page and f'action="/jobs/{job.pk}/release/"' not in page
    page = client.post(f"/jobs/{job.pk}/hold/", follow=True).content.decode()
    assert f"Job {job.pk} is held." in page and "JobHeldUser" in page
    assert f'action="/jobs/{job.pk}/release/"' in page and f'action="/jobs/{job.pk}/hold/"' not in page
    page = client.post(f"/jobs/{job.pk}/release/", follow=True).content.decode()
    assert f"Job {job.pk} is not held." in page and Job.objects.get(pk=job.pk).hold == ""
    running = make_job(roles.owner, JobState.RUNNING)
    page = client.post(f"/jobs/{running.pk}/hold/", follow=True).content.decode()
    assert "only a PENDING job can be held" in page and f'action="/jobs/{running.pk}/hold/"' not in page


def test_an_administrator_s_hold_offers_its_owner_no_release(roles, browser_as, make_job) -> None:
    job = make_job(roles.owner)
    browser_as(roles.staff).post(f"/jobs/{job.pk}/hold/")
    page = browser_as(roles.owner).get(f"/jobs/{job.pk}/").content.decode()
    assert "JobHeldAdmin" in page and f'action="/jobs/{job.pk}/release/"' not in page
    page = browser_as(roles.owner).post(f"/jobs/{job.pk}/release/", follow=True).content.decode()
    assert "only staff release it" in page and Job.objects.get(pk=job.pk).hold == "admin"
    assert f'action="/jobs/{job.pk}/release/"' in browser_as(roles.staff).get(f"/jobs/{job.pk}/").content.decode()


def test_the_owner_changes_a_waiting_job_s_priority_from_the_page(roles, browser_as, make_job) -> None:
    job = make_job(roles.owner)
    client = browser_as(roles.owner)
    page = client.get(f"/jobs/{job.pk}/").content.decode()
    assert f'action="/jobs/{job.pk}/priority/"' in page and 'min="-1000" max="1000"' in page
    page = client.post(f"/jobs/{job.pk}/priority/", {"priority": "50"}, follow=True).content.decode()
    assert f"Job {job.pk} has priority 50." in page and "priority 0 -&gt; 50 by alice" in page
    assert Job.objects.get(pk=job.pk).priority == 50


@pytest.mark.parametrize("value, message", [
    ("5000", "priority: Ensure this value is less than or equal to 1000."),
    ("-1001", "priority: Ensure this value is greater than or equal to -1000."),
    ("ten", "priority: Enter a whole number."),
    ("", "priority: This field is required."),
    ("1e3", "priority: Enter a whole number."),
    ("11", "priority: Must be between -1000 and 10 (quota of user alice)."),
])
def test_a_priority_the_owner_may_not_set_is_refused_by_name_and_nothing_changes(
        roles, browser_as, make_job, value, message) -> None:
    from scheduler.models import JobEvent, Quota

    Quota.objects.create(user=roles.owner, max_priority=10)
    job = make_job(roles.owner)
    page = browser_as(roles.owner).post(f"/jobs/{job.pk}/priority/", {"priority": value}, follow=True)
    assert message in page.content.decode()
    assert Job.objects.get(pk=job.pk).priority == 0
    assert not JobEvent.objects.filter(job=job, reason="PriorityChanged").exists()


def test_a_running_job_has_no_priority_form_and_keeps_its_priority(roles, browser_as, make_job) -> None:
    running = make_job(roles.owner, JobState.RUNNING)
    client = browser_as(roles.owner)
    assert f'action="/jobs/{running.pk}/priority/"' not in client.get(f"/jobs/{running.pk}/").content.decode()
    page = client.post(f"/jobs/{running.pk}/priority/", {"priority": "5"}, follow=True).content.decode()
    assert "only a PENDING job&#x27;s priority can be changed" in page
    assert Job.objects.get(pk=running.pk).priority == 0


def test_staff_change_another_user_s_priority_beyond_their_quota_and_it_is_audited(
        roles, browser_as, make_job) -> None:
    from audit.models import AuditEntry
    from scheduler.models import Quota

    Quota.objects.create(user=roles.owner, max_priority=10)
    job = make_job(roles.owner)
    page = browser_as(roles.staff).post(f"/jobs/{job.pk}/priority/", {"priority": "500"}, follow=True)
    assert f"Job {job.pk} has priority 500." in page.content.decode()
    assert Job.objects.get(pk=job.pk).priority == 500
    entry = AuditEntry.objects.get()
    assert (entry.action, entry.detail) == ("job.priority-by-staff", "priority now 500")


def test_an_ended_job_says_why_it_ended_in_the_list_and_on_its_page(roles, browser_as, make_job) -> None:
    from django.utils import timezone

    from scheduler.models import JobEvent

    job = make_job(roles.owner, name="never")
    Job.objects.filter(pk=job.pk).update(state=JobState.CANCELLED, ended_at=timezone.now())
    JobEvent.objects.create(job=job, from_state=JobState.PENDING, to_state=JobState.CANCELLED,
                            reason="DependencyNeverSatisfied", message="afterok:8 can no longer be satisfied")
    waiting = make_job(roles.owner, name="waiting")
    Job.objects.filter(pk=waiting.pk).update(pending_reason="Resources")
    client = browser_as(roles.owner)
    rows = {row.name: row.ended_because for row in client.get("/jobs/").context["page"]}
    assert rows == {"never": ("DependencyNeverSatisfied", "afterok:8 can no longer be satisfied"),
                    "waiting": ("", "")}
    listed = client.get("/jobs/").content.decode()
    assert 'title="afterok:8 can no longer be satisfied">DependencyNeverSatisfied<' in listed
    assert ">Resources<" in listed
    page = client.get(f"/jobs/{job.pk}/").content.decode()
    ended = " ".join(re.search(r'<span class="muted" id="ended-because">(.*?)</span>', page, re.S).group(1).split())
    assert ended == "(DependencyNeverSatisfied: afterok:8 can no longer be satisfied)"
    assert 'id="ended-because"' not in client.get(f"/jobs/{waiting.pk}/").content.decode()
