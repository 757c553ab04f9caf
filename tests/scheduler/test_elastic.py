"""Declaring a reconfigurable job: API, browser form and CLI accept model, plan, allowed plans,
GPU range and guaranteed; every broken rule is a 400 naming its field and writes nothing; the
job's page, API and CLI show the plan history."""

from __future__ import annotations

import re

import pytest

from portal.cli.commands import build_submission, format_job
from portal.cli.main import build_parser, parse_args
from scheduler.models import Attempt, AttemptState, Job, JobEvent, JobState

pytestmark = pytest.mark.django_db

URL = "/api/v1/jobs/"
VALID = {"name": "bert", "command": "python train.py", "num_gpus": 2, "model": "bert", "plan": "ga",
         "allowed_plans": ["zero-dp"], "min_gpus": 1, "max_gpus": 4, "guaranteed": True}


def test_the_api_stores_a_reconfigurable_job_normalized(roles, api_as) -> None:
    body = api_as(roles.owner).post(URL, {**VALID, "model": "BERT", "plan": "ZeRO-DP+gc", "allowed_plans": ["ga"]},
                                    format="json").json()
    job = Job.objects.get(pk=body["id"])
    assert (job.model, job.plan, job.allowed_plans, job.min_gpus, job.max_gpus, job.guaranteed) == (
        "bert", "zero-dp+gc", ["ga", "zero-dp+gc"], 1, 4, True)
    assert (body["model"], body["plan"], body["allowed_plans"], body["min_gpus"], body["max_gpus"]) == (
        "bert", "zero-dp+gc", ["ga", "zero-dp+gc"], 1, 4)


def test_a_model_without_a_plan_runs_ga_and_a_plain_job_declares_nothing(roles, api_as) -> None:
    client = api_as(roles.owner)
    modelled = Job.objects.get(pk=client.post(URL, {"name": "m", "command": "x", "model": "gpt2"},
                                              format="json").json()["id"])
    plain = Job.objects.get(pk=client.post(URL, {"name": "p", "command": "x"}, format="json").json()["id"])
    assert (modelled.model, modelled.plan, modelled.reconfigurable) == ("gpt2", "ga", False)
    assert (plain.model, plain.plan, plain.allowed_plans, plain.min_gpus, plain.max_gpus, plain.guaranteed) == (
        "", "", [], 0, 0, False)


BAD = [
    ("unknown model", {"model": "resnet"}, "model"),
    ("model as number", {"model": 7}, "model"),
    ("unknown plan", {"plan": "fsdp"}, "plan"),
    ("3D plan of another size", {"plan": "222"}, "plan"),
    ("unknown allowed plan", {"allowed_plans": ["ga", "pipeline"]}, "allowed_plans"),
    ("allowed plans as string", {"allowed_plans": "ga"}, "allowed_plans"),
    ("allowed plan not a string", {"allowed_plans": ["ga", 3, None]}, "allowed_plans"),
    ("allowed plan too long", {"allowed_plans": ["g" * 33]}, "allowed_plans"),
    ("min above the request", {"min_gpus": 3}, "min_gpus"),
    ("min zero", {"min_gpus": 0}, "min_gpus"),
    ("max below the request", {"max_gpus": 1}, "max_gpus"),
    ("guaranteed as string", {"guaranteed": "yes"}, "guaranteed"),
    ("range without a model", {"model": "", "plan": "", "allowed_plans": []}, "min_gpus"),
    ("guaranteed without a model", {"model": "", "allowed_plans": [], "min_gpus": None, "max_gpus": None},
     "guaranteed"),
]


@pytest.mark.parametrize("case, change, field", BAD, ids=[c[0] for c in BAD])
def test_a_broken_rule_is_a_400_naming_the_field_and_writes_nothing(roles, api_as, case, change, field) -> None:
    response = api_as(roles.owner).post(URL, {**VALID, **change}, format="json")
    assert response.status_code == 400, response.content
    errors = response.json()["errors"]
    assert field in errors and all(isinstance(m, str) and m for m in errors[field])  # the documented shape
    assert Job.objects.count() == 0 and JobEvent.objects.count() == 0


def test_min_above_max_names_the_field(roles, api_as) -> None:
    response = api_as(roles.owner).post(URL, {**VALID, "num_gpus": 2, "min_gpus": 2, "max_gpus": 1}, format="json")
    assert response.status_code == 400
    assert set(response.json()["errors"]) >= {"min_gpus", "max_gpus"}


FORM = {"name": "bert", "command": "python train.py", "job_class": "BE", "num_gpus": "2", "model": "bert",
        "plan": "ga", "allowed_plans": "ga, zero-dp", "min_gpus": "1", "max_gpus": "4"}


def test_the_form_declares_a_reconfigurable_job(roles, browser_as) -> None:
    response = browser_as(roles.owner).post("/jobs/new/", FORM)
    assert response.status_code == 302
    job = Job.objects.get()
    assert (job.model, job.plan, job.allowed_plans, job.min_gpus, job.max_gpus) == ("bert", "ga", ["ga", "zero-dp"], 1, 4)


@pytest.mark.parametrize("change, field", [
    ({"model": "resnet"}, "model"),
    ({"plan": "fsdp"}, "plan"),
    ({"allowed_plans": "ga, nope"}, "allowed_plans"),
    ({"min_gpus": "3"}, "min_gpus"),
    ({"max_gpus": "1"}, "max_gpus"),
])
def test_form_errors_sit_at_their_field(roles, browser_as, change, field) -> None:
    response = browser_as(roles.owner).post("/jobs/new/", {**FORM, **change})
    assert response.status_code == 400
    assert field in response.context["form"].errors
    assert re.search(rf'id="id_{field}_error"', response.content.decode())
    assert Job.objects.count() == 0


def test_the_cli_sends_the_reconfiguration_options() -> None:
    args = parse_args(build_parser(), ["submit", "--gpus", "2", "--model", "bert", "--plan", "ga", "--allowed-plans",
                                       "ga,zero-dp", "--min-gpus", "1", "--max-gpus", "4", "--guaranteed", "--",
                                       "python", "train.py"])
    payload = build_submission(args)
    assert {k: payload[k] for k in ("model", "plan", "allowed_plans", "min_gpus", "max_gpus", "guaranteed")} == {
        "model": "bert", "plan": "ga", "allowed_plans": ["ga", "zero-dp"], "min_gpus": 1, "max_gpus": 4,
        "guaranteed": True}
    plain = build_submission(parse_args(build_parser(), ["submit", "--", "python", "train.py"]))
    assert not {"model", "plan", "allowed_plans", "min_gpus", "max_gpus", "guaranteed"} & set(plain)


def _with_history(owner, make_job) -> Job:  # noqa: ANN001
    job = make_job(owner, JobState.COMPLETED, model="bert", plan="ga", allowed_plans=["ga", "zero-dp"],
                   num_gpus=2, min_gpus=1, max_gpus=4, reconfiguration_count=1)
    Attempt.objects.filter(job=job, number=1).update(state=AttemptState.RECONFIGURED, plan="ga",
                                                     notice_reason="reconfigure")
    Job.objects.filter(pk=job.pk).update(attempt_count=2)
    Attempt.objects.create(job=job, number=2, gpu_allocation={"n1": [0, 1, 2, 3]}, state=AttemptState.COMPLETED,
                           plan="zero-dp", grad_accum_steps=1)
    return job


def test_the_job_page_api_and_cli_show_the_plan_history(roles, browser_as, api_as, make_job) -> None:
    job = _with_history(roles.owner, make_job)
    html = browser_as(roles.owner).get(f"/jobs/{job.pk}/").content.decode()
    table = re.search(r'<table class="plans" id="plan-history">.*?</table>', html, re.S).group(0)
    rows = [re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", r)).strip() for r in re.findall(r"<tr>(.*?)</tr>", table, re.S)]
    assert rows[1].startswith("1 ga 2 1") and rows[1].endswith("reconfigured")
    assert rows[2].startswith("2 zero-dp 4 1") and rows[2].endswith("COMPLETED")
    assert "1 reconfigured" in html

    body = api_as(roles.owner).get(f"{URL}{job.pk}/").json()
    assert [(a["plan"], a["gpu_count"], a["outcome"], a["notice_reason"]) for a in body["attempts"]] == [
        ("ga", 2, "RECONFIGURED", "reconfigure"), ("zero-dp", 4, "COMPLETED", "")]
    assert body["reconfiguration_count"] == 1
    text = format_job(body)
    history = text.split("Plan history:\n")[1].split("\n\n")[0].splitlines()
    assert history[1].split() == ["1", "ga", "2", "1", "reconfigured"]
    assert history[2].split() == ["2", "zero-dp", "4", "1", "COMPLETED"]


def test_the_live_job_page_state_carries_the_plan_history(roles, make_job) -> None:
    from portal.dashboard.job_page import job_state

    job = _with_history(roles.owner, make_job)
    state = job_state(Job.objects.get(pk=job.pk))
    assert state["reconfiguration_count"] == 1
    assert [(a["plan"], a["gpu_count"], a["grad_accum_steps"], a["notice_reason"]) for a in state["attempts"]] == [
        ("ga", 2, 1, "reconfigure"), ("zero-dp", 4, 1, "")]
