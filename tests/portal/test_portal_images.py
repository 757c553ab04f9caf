"""Images on the portal: the images endpoint, submission by form, API and CLI naming an image, and
the admin (superusers register; saving clears the exclusions of the image's pending jobs)."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User

from portal.cli.commands import build_submission
from portal.cli.main import build_parser, parse_args
from scheduler.images import Image
from scheduler.models import Job, JobState

pytestmark = pytest.mark.django_db
DIGEST = "sha256:" + "cd" * 32


@pytest.fixture
def py3(db) -> Image:  # noqa: ANN001
    Image.objects.create(name="old", uri="/shared/old.tar", digest=DIGEST, enabled=False)
    return Image.objects.create(name="py3", uri="/shared/py3.tar", digest=DIGEST, note="python 3")


def test_the_images_endpoint_lists_enabled_images_without_their_storage_path(roles, api_as, py3) -> None:
    body = api_as(roles.owner).get("/api/v1/images/").json()
    assert body == [{"name": "py3", "digest": DIGEST, "note": "python 3"}]


def test_api_submission_names_an_image_and_the_job_shows_it(roles, api_as, py3) -> None:
    response = api_as(roles.owner).post("/api/v1/jobs/", {"name": "x", "command": "true", "image": "py3"},
                                        format="json")
    assert response.status_code == 201
    assert (response.json()["image"], response.json()["run_as"]) == ("py3", "alice")
    assert api_as(roles.owner).get("/api/v1/jobs/").json()["results"][0]["image"] == "py3"


@pytest.mark.parametrize("value, says", [("old", "disabled"), ("nope", "No image"), (7, "Not a valid string")])
def test_api_refuses_a_bad_image_naming_the_field(roles, api_as, py3, value, says) -> None:
    response = api_as(roles.owner).post("/api/v1/jobs/", {"name": "x", "command": "true", "image": value},
                                        format="json")
    assert response.status_code == 400 and says in response.json()["errors"]["image"][0]
    assert not Job.objects.exists()


def test_array_refusal_names_the_position_and_field(roles, api_as, py3) -> None:
    body = {"jobs": [{"name": "a", "command": "true", "image": "py3"}, {"name": "b", "command": "true",
                                                                        "image": "old"}]}
    response = api_as(roles.owner).post("/api/v1/jobs/array/", body, format="json")
    assert response.status_code == 400 and list(response.json()["errors"]) == ["jobs[1].image"]


def test_the_form_offers_enabled_images_and_submits_with_one(roles, browser_as, py3) -> None:
    client = browser_as(roles.owner)
    page = client.get("/jobs/new/").content.decode()
    assert 'value="py3"' in page and 'value="old"' not in page
    response = client.post("/jobs/new/", {"name": "x", "command": "true", "job_class": "BE", "num_gpus": 1,
                                          "image": "py3"})
    assert response.status_code == 302 and Job.objects.get().image == py3
    refused = client.post("/jobs/new/", {"name": "y", "command": "true", "job_class": "BE", "num_gpus": 1,
                                         "image": "old"})
    assert refused.status_code == 400 and Job.objects.count() == 1


def test_the_job_page_shows_the_image_and_the_user(roles, browser_as, py3, make_job) -> None:
    job = make_job(roles.owner, image=py3, run_as="alice")
    html = browser_as(roles.owner).get(f"/jobs/{job.pk}/").content.decode()
    assert '<dd id="image">py3</dd>' in html and '<dd id="run-as">alice</dd>' in html


def test_cli_image_option_goes_into_the_submission() -> None:
    args = parse_args(build_parser(), ["submit", "--image", "py3", "--", "python", "train.py"])
    assert build_submission(args)["image"] == "py3"
    plain = parse_args(build_parser(), ["submit", "--", "true"])
    assert "image" not in build_submission(plain)


def test_superuser_registers_images_with_checked_fields_and_a_save_clears_exclusions(roles, browser_as, py3,
                                                                                     make_job) -> None:
    boss = User.objects.create_superuser("boss", "boss@example.org", "a-long-test-password-42")
    client = browser_as(boss)
    bad = client.post("/admin/scheduler/image/add/", {"name": "new", "uri": "rel.tar", "digest": "sha256:x",
                                                       "enabled": "on"})
    assert bad.status_code == 200 and not Image.objects.filter(name="new").exists()
    job = make_job(roles.owner, image=py3, excluded_nodes=["n1"])
    done = make_job(roles.owner, state=JobState.COMPLETED, image=py3, excluded_nodes=["n1"])
    response = client.post(f"/admin/scheduler/image/{py3.pk}/change/",
                           {"name": "py3", "uri": "/shared/py3-fixed.tar", "digest": DIGEST, "enabled": "on",
                            "note": "fixed"})
    assert response.status_code == 302
    job.refresh_from_db(), done.refresh_from_db()
    assert job.excluded_nodes == [] and done.excluded_nodes == ["n1"]
    assert Image.objects.get(pk=py3.pk).uri == "/shared/py3-fixed.tar"


def test_staff_who_are_not_superusers_cannot_register_images(roles, browser_as) -> None:
    response = browser_as(roles.staff).post("/admin/scheduler/image/add/", {"name": "x", "uri": "/x.tar",
                                                                             "digest": DIGEST})
    assert response.status_code == 403 and not Image.objects.exists()
