"""Adaptive (Pollux) jobs through the API, the form, the job page and ``gpusched``: the profile is
validated naming the field, hostile values are refused with nothing written, and each attempt's
batch is shown to whoever may see the job."""

from __future__ import annotations

import pytest

from portal.cli.commands import build_submission, format_job
from portal.cli.main import build_parser, parse_args
from scheduler.models import Attempt, Job

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("pollux_profiles")]

URL = "/api/v1/jobs/"
BODY = {"name": "train", "command": "python train.py"}


def test_the_api_takes_an_adaptive_job_and_shows_each_attempts_batch(roles, api_as):
    client = api_as(roles.owner)
    response = client.post(URL, {**BODY, "adaptive_app": "bert", "num_gpus": 1, "max_gpus": 4}, format="json")
    assert response.status_code == 201, response.content
    body = response.json()
    assert (body["adaptive_app"], body["max_gpus"]) == ("bert", 4)
    job = Job.objects.get(pk=body["id"])
    Attempt.objects.create(job=job, number=1, gpu_allocation={"n1": [0, 1]}, plan="ga", grad_accum_steps=2,
                           batch_size=96)
    shown = client.get(f"{URL}{job.pk}/").json()
    assert shown["attempts"][0]["batch_size"] == 96
    assert api_as(roles.other).get(f"{URL}{job.pk}/").status_code == 404
    assert api_as(roles.staff).get(f"{URL}{job.pk}/").json()["attempts"][0]["batch_size"] == 96
    text = format_job(shown)
    assert "Adaptive" in text and "bert, 1-4 GPUs" in text
    history = text.split("Plan history:\n")[1].split("\n\n")[0].splitlines()
    assert history[0].split() == ["#", "PLAN", "GPUS", "ACCUM", "BATCH", "ENDED"]
    assert history[1].split()[:5] == ["1", "ga", "2", "2", "96"]


@pytest.mark.parametrize("value", ["<script>", "x" * 33, 7, ["cifar10"], "../../etc", "cifar10\x00"])
def test_hostile_profiles_are_refused_naming_the_field(roles, api_as, value):
    response = api_as(roles.owner).post(URL, {**BODY, "adaptive_app": value}, format="json")
    assert response.status_code == 400
    assert list(response.json()["errors"]) == ["adaptive_app"]
    assert not Job.objects.exists()


def test_an_adaptive_job_with_a_model_or_too_many_gpus_is_refused(roles, api_as):
    client = api_as(roles.owner)
    both = client.post(URL, {**BODY, "adaptive_app": "cifar10", "model": "bert"}, format="json")
    assert both.status_code == 400 and list(both.json()["errors"]) == ["adaptive_app"]
    wide = client.post(URL, {**BODY, "adaptive_app": "cifar10", "num_gpus": 2, "max_gpus": 1}, format="json")
    assert wide.status_code == 400 and list(wide.json()["errors"]) == ["max_gpus"]
    assert not Job.objects.exists()


def test_anonymous_cannot_submit_an_adaptive_job(client):
    response = client.post(URL, {**BODY, "adaptive_app": "cifar10"}, content_type="application/json")
    assert response.status_code in (401, 403)
    assert not Job.objects.exists()


def test_the_form_and_the_job_page_carry_the_profile(roles, browser_as, client):
    owner = browser_as(roles.owner)
    response = owner.post("/jobs/new/", {"name": "b", "command": "true", "job_class": "BE", "num_gpus": 1,
                                         "adaptive_app": "cifar10", "max_gpus": 2})
    assert response.status_code == 302, response.content.decode()[:2000]
    job = Job.objects.get(name="b")
    assert (job.adaptive_app, job.max_gpus) == ("cifar10", 2)
    page = owner.get(f"/jobs/{job.pk}/").content.decode()
    assert '<dd id="adaptive">cifar10, 1 to 2 GPUs, batch size chosen per allocation</dd>' in page
    assert 'id="plan-history"' in page
    assert browser_as(roles.other).get(f"/jobs/{job.pk}/").status_code == 404
    refused = owner.post("/jobs/new/", {"name": "c", "command": "true", "job_class": "BE", "num_gpus": 1,
                                        "adaptive_app": "resnet"})
    assert refused.status_code == 400 and "is not a profile" in refused.content.decode()
    assert not Job.objects.filter(name="c").exists()


def test_gpusched_submit_adaptive_sends_the_profile() -> None:
    args = parse_args(build_parser(), ["submit", "--adaptive", "cifar10", "--gpus", "1", "--max-gpus", "4", "--",
                                       "python", "train.py"])
    assert build_submission(args) == {"name": "train.py", "command": "python train.py", "num_gpus": 1,
                                      "max_gpus": 4, "adaptive_app": "cifar10"}
