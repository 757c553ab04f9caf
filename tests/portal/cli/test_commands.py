"""End to end: the CLI against the real portal served by Django's live server,
on the test database (PostgreSQL when DATABASE_URL says so), with real API
tokens. Users, jobs and nodes come from the portal's fixtures
(tests/portal/conftest.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from scheduler.models import Job

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def as_user(live_server, token_for, run_cli):  # noqa: ANN001, ANN201
    """``as_user(user)(*argv)``: run the CLI against the live server with a fresh token of ``user``."""

    def bind(user):  # noqa: ANN001, ANN202
        env = {"GPUSCHED_URL": live_server.url, "GPUSCHED_TOKEN": token_for(user)}
        return lambda *argv: run_cli(*argv, env=env)

    return bind


@pytest.mark.django_db(transaction=False)
def test_the_clients_final_states_are_the_portals_terminal_states() -> None:
    from portal.cli.logs import FINAL_STATES
    from scheduler.models import TERMINAL_STATES

    assert FINAL_STATES == {str(s) for s in TERMINAL_STATES}


def test_submit_creates_the_job_with_every_option(roles, as_user) -> None:
    from scheduler.models import Job

    code, out, err = as_user(roles.owner)(
        "submit", "--class", "TE", "--gpus", "2", "--cpus", "4", "--mem", "8G", "--grace", "1m",
        "--time-limit", "30m", "--priority", "5", "--", "python", "train.py", "--tag", "a b")
    assert (code, err) == (0, "")
    job = Job.objects.get()
    assert out == f"Submitted job {job.pk} (train.py): PENDING\n"
    assert (job.owner, job.name, job.command, job.job_class) == (
        roles.owner, "train.py", "python train.py --tag 'a b'", "TE")
    assert (job.num_gpus, job.num_cpus, job.mem_gb, job.grace_period, job.time_limit, job.priority) == (
        2, 4.0, 8.0, 60, 1800, 5)


def test_submit_json_is_the_api_job_object(roles, as_user) -> None:
    code, out, _ = as_user(roles.owner)("submit", "--json", "--command", "echo hi | tee out.txt")
    body = json.loads(out)
    assert code == 0
    assert (body["command"], body["job_class"], body["owner"], body["state"]) == (
        "echo hi | tee out.txt", "BE", "alice", "PENDING")


def test_invalid_submission_names_the_field_and_writes_nothing(roles, as_user) -> None:
    from scheduler.models import Job

    code, out, err = as_user(roles.owner)("submit", "--gpus", "0", "--", "true")
    assert (code, out) == (1, "")
    assert err.startswith("gpusched: error: HTTP 400 Bad Request: num_gpus: ")
    assert err.count("\n") == 1
    assert not Job.objects.exists()


def test_quota_refusal_names_limit_and_usage(roles, as_user) -> None:
    from scheduler.models import Job, Quota

    Quota.objects.create(user=roles.owner, max_te_job_gpus=1)
    code, _, err = as_user(roles.owner)("submit", "--class", "TE", "--gpus", "2", "--", "true")
    assert code == 1
    assert err.startswith("gpusched: error: HTTP 403 Forbidden: ")
    assert err.endswith("asks for 2 (limit max_te_job_gpus = 1, current usage 2, requested 2)\n")
    assert not Job.objects.exists()


def test_bad_token_is_refused(live_server, roles, run_cli) -> None:
    code, out, err = run_cli("list", env={"GPUSCHED_URL": live_server.url, "GPUSCHED_TOKEN": "not-a-key"})
    assert (code, out) == (1, "")
    assert err.startswith("gpusched: error: HTTP 401 ")


def _dated(make_job, owner, name: str, submitted_days_ago: float, ended_days_ago: float | None):  # noqa: ANN001, ANN202
    from datetime import timedelta

    from django.utils import timezone

    now = timezone.now()
    job = make_job(owner, name=name, state="COMPLETED" if ended_days_ago is not None else "RUNNING")
    Job.objects.filter(pk=job.pk).update(
        submitted_at=now - timedelta(days=submitted_days_ago),
        ended_at=None if ended_days_ago is None else now - timedelta(days=ended_days_ago))
    return job


def test_list_from_and_to_select_the_jobs_active_in_between_like_sacct(roles, as_user, make_job) -> None:
    from datetime import timedelta

    from django.utils import timezone

    _dated(make_job, roles.owner, "ended-long-ago", 30, 20)
    _dated(make_job, roles.owner, "ended-yesterday", 5, 1)
    _dated(make_job, roles.owner, "still-running", 3, None)
    _dated(make_job, roles.owner, "submitted-today", 0.01, None)
    cli = as_user(roles.owner)
    day = lambda n: (timezone.now() - timedelta(days=n)).date().isoformat()  # noqa: E731

    def names(*argv: str) -> set[str]:
        code, out, err = cli("list", "--json", *argv)
        assert code == 0, err
        return {j["name"] for j in json.loads(out)["results"]}

    assert names("--from", day(2)) == {"ended-yesterday", "still-running", "submitted-today"}
    assert names("--to", day(4)) == {"ended-long-ago", "ended-yesterday"}  # submitted by the end of that day
    assert names("--from", day(10), "--to", day(2)) == {"ended-yesterday", "still-running"}
    code, _, err = cli("list", "--from", "last tuesday")
    assert code != 0 and "from: 'last tuesday' is not a date" in err
    code, _, err = cli("list", "--from", day(1), "--to", day(3))
    assert code != 0 and "to: Must be after from." in err


def test_list_user_gives_staff_one_users_jobs_and_nobody_else_more_than_their_own(roles, as_user, make_job) -> None:
    make_job(roles.owner, name="alices")
    make_job(roles.other, name="bobs")

    def names(user, *argv: str) -> set[str]:  # noqa: ANN001
        code, out, err = as_user(user)("list", "--json", *argv)
        assert code == 0, err
        return {j["name"] for j in json.loads(out)["results"]}

    assert names(roles.staff, "--user", "bob") == {"bobs"}
    assert names(roles.staff) == {"alices", "bobs"}
    assert names(roles.owner, "--user", "bob") == {"alices"}


def test_list_filters_and_all_pages(roles, as_user, make_job) -> None:
    for i in range(27):
        make_job(roles.owner, name=f"be-{i}", job_class="BE")
    make_job(roles.owner, name="te-running", job_class="TE", state="RUNNING")
    make_job(roles.other, name="not-mine")
    cli = as_user(roles.owner)

    code, out, _ = cli("list", "--class", "TE", "--state", "running")
    rows = out.splitlines()
    assert code == 0 and len(rows) == 2
    assert rows[1].split()[1:8] == ["te-running", "alice", "TE", "1", "0", "RUNNING", "-"]

    code, out, _ = cli("list", "--state", "pd,r", "--all-pages")
    assert code == 0 and len(out.splitlines()) == 1 + 28  # the header and every job: all are pending or running

    code, out, _ = cli("list", "--json")
    first = json.loads(out)
    assert (first["count"], len(first["results"]), first["next"] is not None) == (28, 25, True)
    code, out, _ = cli("list")
    assert out.splitlines()[-1] == "(page 1: 25 of 28 jobs; --page 2 or --all-pages for more)"

    code, out, _ = cli("list", "--all-pages", "--json")
    names = {j["name"] for j in json.loads(out)["results"]}
    assert code == 0 and len(names) == 28 and "not-mine" not in names


def test_unknown_state_filter_is_the_portals_400(roles, as_user) -> None:
    code, _, err = as_user(roles.owner)("list", "--state", "SLEEPING")
    assert code == 1
    assert err.startswith('gpusched: error: HTTP 400 Bad Request: state: "SLEEPING" is not one of ')


def test_show_own_job_but_not_another_users(roles, as_user, make_job) -> None:
    mine = make_job(roles.owner, name="mine", state="RUNNING", num_gpus=2)
    theirs = make_job(roles.other, name="theirs")
    cli = as_user(roles.owner)
    code, out, _ = cli("show", str(mine.pk))
    assert code == 0
    assert f"Job:           {mine.pk}\n" in out and "\nState:         RUNNING\n" in out
    attempt_row = out.split("Attempts:\n")[1].splitlines()[1].split()
    assert attempt_row[:3] == ["1", "n1", "n1:0,1"]
    assert cli("show", str(theirs.pk)) == (1, "", "gpusched: error: HTTP 404 Not Found: Not found.\n")
    code, out, _ = as_user(roles.staff)("show", str(theirs.pk), "--json")
    assert code == 0 and json.loads(out)["name"] == "theirs"


def test_cancel_pending_then_again(roles, as_user, make_job) -> None:
    job = make_job(roles.owner)
    cli = as_user(roles.owner)
    assert cli("cancel", str(job.pk)) == (0, f"Job {job.pk}: CANCELLED\n", "")
    code, _, err = cli("cancel", str(job.pk))
    assert code == 1 and err.startswith("gpusched: error: HTTP 409 Conflict: ")
    job.refresh_from_db()
    assert job.state == "CANCELLED"


def test_cancel_of_several_jobs_cancels_each_it_may_and_names_each_refusal(roles, as_user, make_job) -> None:
    mine, theirs, also_mine = make_job(roles.owner), make_job(roles.other), make_job(roles.owner)
    code, out, err = as_user(roles.owner)("cancel", str(mine.pk), str(theirs.pk), str(also_mine.pk))
    assert code == 1
    assert out == f"Job {mine.pk}: CANCELLED\nJob {also_mine.pk}: CANCELLED\n"
    assert err.startswith(f"gpusched: error: {theirs.pk}: HTTP 404 Not Found") and err.count("\n") == 1
    assert [Job.objects.get(pk=j.pk).state for j in (mine, theirs, also_mine)] == ["CANCELLED", "PENDING", "CANCELLED"]
    code, out, _ = as_user(roles.owner)("--json", "cancel", str(mine.pk))
    assert code == 1 and out == ""


def test_cancel_json_is_the_job_for_one_id_and_a_list_for_several(roles, as_user, make_job) -> None:
    first, second, third = (make_job(roles.owner) for _ in range(3))
    cli = as_user(roles.owner)
    code, out, _ = cli("--json", "cancel", str(first.pk))
    assert code == 0 and json.loads(out)["id"] == first.pk
    code, out, _ = cli("--json", "cancel", str(second.pk), str(third.pk))
    assert code == 0 and [job["state"] for job in json.loads(out)] == ["CANCELLED", "CANCELLED"]


def test_cancel_of_another_users_job_is_not_found_and_changes_nothing(roles, as_user, make_job) -> None:
    job = make_job(roles.other)
    assert as_user(roles.owner)("cancel", str(job.pk))[0] == 1
    job.refresh_from_db()
    assert job.state == "PENDING"


def test_logs_and_follow_of_a_finished_job(roles, as_user, make_job) -> None:
    from scheduler.models import AttemptLog

    job = make_job(roles.owner, state="COMPLETED")
    attempt = job.attempts.get()
    AttemptLog.objects.create(attempt=attempt, text="step 1\nstep 2")
    AttemptLog.objects.create(attempt=attempt, text="done")
    cli = as_user(roles.owner)
    assert cli("logs", str(job.pk)) == (0, "step 1\nstep 2\ndone\n", "")
    assert cli("logs", str(job.pk), "--follow") == (0, "step 1\nstep 2\ndone\n", "")
    code, _, err = cli("logs", str(job.pk), "--attempt", "3")
    assert code == 1 and "404" in err
    assert cli("logs", str(job.pk), "--tail", "2") == (0, "step 2\ndone\n", "")


def test_a_log_longer_than_a_page_is_printed_whole_or_from_its_tail(roles, as_user, make_job) -> None:
    from scheduler.models import AttemptLog

    job = make_job(roles.owner, state="COMPLETED")
    attempt = job.attempts.get()
    AttemptLog.objects.create(attempt=attempt, text="\n".join(f"line {n}" for n in range(25_000)))
    AttemptLog.objects.create(attempt=attempt, text="the end")
    expected = "".join(f"line {n}\n" for n in range(25_000)) + "the end\n"
    cli = as_user(roles.owner)
    assert cli("logs", str(job.pk)) == (0, expected, "")
    assert cli("logs", str(job.pk), "--follow") == (0, expected, "")
    assert cli("logs", str(job.pk), "--tail", "2") == (0, "line 24999\nthe end\n", "")
    last_12000 = "".join(f"line {n}\n" for n in range(13_001, 25_000)) + "the end\n"
    assert cli("logs", str(job.pk), "--tail", "12000") == (0, last_12000, "")  # more than one page
    assert cli("logs", str(job.pk), "--tail", "12000", "--follow") == (0, last_12000, "")
    code, out, _ = cli("logs", str(job.pk), "--json")
    body = json.loads(out)
    assert code == 0 and len(body["lines"]) == 25_001 and body["offset"] == 0 and body["lines"][-1] == "the end"


def test_quota_and_nodes(roles, as_user, make_node) -> None:
    from scheduler.models import Quota

    Quota.objects.create(user=roles.owner, max_gpus=8, max_pending_jobs=3)
    make_node("gpu-a", 4)
    cli = as_user(roles.owner)
    code, out, _ = cli("quota")
    rows = {line.split()[0]: line.split()[1:] for line in out.splitlines()[1:] if not line.startswith("(")}
    assert code == 0
    assert rows["max_gpus"] == ["8", "0"] and rows["max_pending_jobs"] == ["3", "0"]
    assert rows["max_te_gpus"][0] == "unlimited"
    assert out.splitlines()[-1] == "(the tightest of: user alice)"
    code, out, _ = cli("nodes")
    assert code == 0
    assert out.splitlines()[1].split()[:6] == ["gpu-a", "UP", "4", "4", "32", "256"]


def test_module_entry_point_in_a_subprocess(live_server, roles, token_for, tmp_path: Path) -> None:
    """``python -m portal.cli`` as a separate process, configured by a config file."""
    config = tmp_path / "config.toml"
    config.write_text(f'url = "{live_server.url}"\ntoken = "{token_for(roles.owner)}"\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUSCHED_")}
    env.update(GPUSCHED_CONFIG=str(config), HOME=str(tmp_path))
    run = subprocess.run([sys.executable, "-m", "portal.cli", "submit", "-q", "--", "sleep", "1"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert (run.returncode, run.stderr) == (0, "")
    from scheduler.models import Job

    assert run.stdout == f"{Job.objects.get().pk}\n"


def test_submit_array_stores_every_job_with_its_index(roles, as_user) -> None:
    from scheduler.models import Job

    code, out, err = as_user(roles.owner)("submit", "--array", "0-4:2", "--name", "sweep", "--gpus", "1", "--",
                                          "python", "train.py", "--seed", "%a")
    assert (code, err) == (0, "")
    jobs = list(Job.objects.order_by("pk"))
    assert [(j.name, j.command, j.array_index) for j in jobs] == [
        (f"sweep_{i}", f"python train.py --seed {i}", i) for i in (0, 2, 4)]
    array = jobs[0].pk
    assert {j.array_id for j in jobs} == {array}
    assert out == f"Submitted job array {array} of 3 tasks ({array}_0..{array}_4): PENDING\n"
    code, out, _ = as_user(roles.owner)("show", f"{array}_2")
    assert code == 0 and "sweep_2" in out
    assert f"Array task:    {array}_2\n" in out
    code, out, _ = as_user(roles.owner)("list")
    ids = [line.split()[0] for line in out.splitlines()[1:]]
    assert ids == [f"{array}_4", f"{array}_2", f"{array}_0"]  # as squeue and the web list address them
    code, out, _ = as_user(roles.owner)("list", "--array", str(array))
    assert [line.split()[0] for line in out.splitlines()[1:]] == [f"{array}_4", f"{array}_2", f"{array}_0"]
    code, out, _ = as_user(roles.owner)("cancel", f"{array}_2")
    assert code == 0 and Job.objects.get(pk=jobs[1].pk).state == "CANCELLED"
    assert out == f"Job {array}_2: CANCELLED\n"  # addressed as the user named it
    assert Job.objects.get(pk=jobs[2].pk).state == "PENDING"
    code, out, _ = as_user(roles.owner)("cancel", str(array))
    assert code == 0 and set(Job.objects.values_list("state", flat=True)) == {"CANCELLED"}
    # The whole array: a line per task as it is after the change, not the first task's alone.
    assert out == "".join(f"Job {array}_{i}: CANCELLED\n" for i in (0, 2, 4))


def test_submit_array_is_all_or_nothing_and_names_the_job(roles, as_user) -> None:
    from scheduler.models import Job, Quota

    Quota.objects.create(user=roles.owner, max_pending_jobs=2)
    code, out, err = as_user(roles.owner)("submit", "--array", "0-2", "--", "true")
    assert code != 0 and "max_pending_jobs" in err
    assert not Job.objects.exists()


@pytest.mark.parametrize("spec, says", [("9-0", "ends before it starts"), ("0-9999", "at most 500 tasks"),
                                        ("x;ls", "is not an index")])
def test_a_bad_array_is_refused_naming_the_field(roles, as_user, spec, says) -> None:
    from scheduler.models import Job

    code, _, err = as_user(roles.owner)("submit", "--array", spec, "--", "true")
    assert code == 1 and "array: " in err and says in err
    assert not Job.objects.exists()


def test_another_users_array_task_is_not_found(roles, as_user) -> None:
    from scheduler.models import Job

    assert as_user(roles.owner)("submit", "--array", "1,3", "--", "true")[0] == 0
    array = Job.objects.order_by("pk").first().pk
    for command in ("show", "cancel"):
        code, _, err = as_user(roles.other)(command, f"{array}_3")
        assert code == 1 and "404" in err
    code, _, err = as_user(roles.other)("cancel", str(array))
    assert code == 1 and "404" in err
    assert set(Job.objects.values_list("state", flat=True)) == {"PENDING"}
    code, _, err = as_user(roles.owner)("show", "12_x")
    assert code == 2 and "is not a job id (12) or an array task (12_3)" in err


def test_show_prints_progress_of_own_job_and_json_carries_it(roles, as_user, make_job) -> None:
    from django.utils import timezone

    from jobprogress import services

    job = make_job(roles.owner, name="reporting", state="RUNNING")
    services.record_progress(job.pk, 1, {"t": 100.0, "step": 10, "total_steps": 40, "epoch": 1,
                                         "metrics": {"loss": 0.25}}, timezone.now())
    services.record_progress(job.pk, 1, {"t": 110.0, "step": 20, "checkpoint": {"step": 20, "path": "ck/20"}},
                             timezone.now())
    code, out, _ = as_user(roles.owner)("show", str(job.pk))
    progress = out.split("Progress:\n")[1]
    assert code == 0 and "step 20 of 40 (50.0 %)" in progress and "1 steps/s" in progress
    assert "0:00:20" in progress and "loss:" in progress and "0.25" in progress and "step 20 at ck/20" in progress
    code, out, _ = as_user(roles.owner)("show", str(job.pk), "--json")
    assert json.loads(out)["progress"]["step"] == 20
    assert as_user(roles.other)("show", str(job.pk))[0] == 1


@pytest.fixture
def forecasts_stored(redis_url):  # noqa: ANN001, ANN201
    """``store({job_id: (start epoch or None, position)})`` into the test Redis; cleared after."""
    import redis

    from scheduler import forecast_store

    client = redis.Redis.from_url(redis_url)
    client.delete(forecast_store.HASH_KEY, forecast_store.AT_KEY, forecast_store.HEADS_KEY)
    yield lambda entries: forecast_store.write(entries, 1_700_000_000.0)
    client.delete(forecast_store.HASH_KEY, forecast_store.AT_KEY, forecast_store.HEADS_KEY)


def test_list_start_shows_pending_jobs_with_position_and_forecast(roles, as_user, make_job, forecasts_stored) -> None:
    soon = make_job(roles.owner, name="soon")
    later = make_job(roles.owner, name="later")
    make_job(roles.owner, name="running", state="RUNNING")
    hidden = make_job(roles.other, name="not-mine")
    forecasts_stored({soon.pk: (1_700_000_600.0, 1), later.pk: (None, 2), hidden.pk: (1_700_000_000.0, 3)})
    code, out, _ = as_user(roles.owner)("list", "--start")
    rows = out.splitlines()
    assert code == 0 and rows[0].split() == ["ID", "NAME", "OWNER", "CLASS", "GPUS", "POS", "START_TIME", "REASON"]
    by_name = {r.split()[1]: r for r in rows[1:]}
    assert set(by_name) == {"soon", "later"}  # pending and mine only
    assert by_name["soon"].split()[5] == "1" and "> 14 days" in by_name["later"]
    code, out, _ = as_user(roles.owner)("show", str(soon.pk))
    assert "\nPosition:      1\n" in out and "\nStarts at:     " in out


def test_hold_and_release_through_the_cli(roles, as_user, make_job) -> None:
    first, second = make_job(roles.owner), make_job(roles.owner)
    cli = as_user(roles.owner)
    assert cli("hold", str(first.pk), str(second.pk)) == (
        0, f"Job {first.pk}: PENDING, held (user)\nJob {second.pk}: PENDING, held (user)\n", "")
    assert cli("release", str(second.pk)) == (0, f"Job {second.pk}: PENDING, not held\n", "")
    assert dict(Job.objects.filter(pk__in=[first.pk, second.pk]).values_list("pk", "hold")) == {
        first.pk: "user", second.pk: ""}


def test_hold_refusals_are_the_api_s_words(roles, as_user, make_job) -> None:
    running = make_job(roles.owner, state="RUNNING")
    cli = as_user(roles.owner)
    assert cli("hold", str(running.pk)) == (
        1, "", f"gpusched: error: HTTP 409 Conflict: job {running.pk} is RUNNING: only a PENDING job can be held\n")
    held = make_job(roles.owner)
    assert as_user(roles.staff)("hold", str(held.pk))[0] == 0
    code, _, err = cli("release", str(held.pk))
    assert code == 1 and err == (f"gpusched: error: HTTP 403 Forbidden: job {held.pk} is held by an administrator: "
                                 "only staff release it\n")
    assert Job.objects.get(pk=held.pk).hold == "admin"


def test_hold_and_release_of_several_jobs_change_each_they_may_and_name_each_refusal(
        roles, as_user, make_job) -> None:
    """A refused id among others (another user's job, a running one) does not hide the jobs changed."""
    first, running, second = make_job(roles.owner), make_job(roles.owner, state="RUNNING"), make_job(roles.owner)
    foreign = make_job(roles.other)
    cli = as_user(roles.owner)
    code, out, err = cli("hold", str(first.pk), str(foreign.pk), str(running.pk), str(second.pk))
    assert code == 1 and out == f"Job {first.pk}: PENDING, held (user)\nJob {second.pk}: PENDING, held (user)\n"
    assert err == (f"gpusched: error: {foreign.pk}: HTTP 404 Not Found: Not found.; {running.pk}: HTTP 409 Conflict: "
                   f"job {running.pk} is RUNNING: only a PENDING job can be held\n")
    code, out, err = cli("--json", "release", str(foreign.pk), str(second.pk))
    assert code == 1 and [job["id"] for job in json.loads(out)] == [second.pk] and f"{foreign.pk}: HTTP 404" in err
    assert dict(Job.objects.filter(pk__in=[first.pk, second.pk, foreign.pk]).values_list("pk", "hold")) == {
        first.pk: "user", second.pk: "", foreign.pk: ""}
    code, out, _ = cli("--json", "release", str(first.pk))
    assert code == 0 and json.loads(out)["hold"] == ""  # one id: the job itself, as cancel gives it


def test_update_changes_a_waiting_job_s_priority_within_the_range(roles, as_user, make_job) -> None:
    from scheduler.models import Quota

    Quota.objects.create(user=roles.owner, max_priority=10)
    job = make_job(roles.owner)
    cli = as_user(roles.owner)
    assert cli("update", str(job.pk), "--priority", "10") == (0, f"Job {job.pk}: PENDING, priority 10\n", "")
    code, _, err = cli("update", str(job.pk), "--priority", "11")
    assert code == 1 and "HTTP 400" in err and "Must be between -1000 and 10 (quota of user alice)." in err
    assert Job.objects.get(pk=job.pk).priority == 10


def test_shell_polls_its_queued_session_through_the_api_until_the_wait_runs_out(roles, as_user) -> None:
    code, out, err = as_user(roles.owner)("shell", "--no-open", "--wait", "1")
    session = Job.objects.get(owner=roles.owner)
    assert out.startswith(f"session {session.pk} submitted: ") and out.endswith(f"/jobs/{session.pk}/\n")
    assert code == 1 and f"session {session.pk} is not ready after 1 s (phase queued)" in err
