"""Images: registration rules, submission by name, what a launch carries, and a node where the image
is unavailable (attempt IMAGE_UNAVAILABLE, the node excluded for the job, held when no node is left)."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from cluster import protocol, reports
from scheduler import loop
from scheduler.images import Image
from scheduler.models import Attempt, AttemptState, Job, JobState
from scheduler.services import JobArrayInvalid, JobRequest, JobRequestInvalid, clear_image_exclusions, submit_jobs
from tests.support.live_helpers import submit

pytestmark = pytest.mark.django_db
DIGEST = "sha256:" + "ab" * 32


def make_image(name: str = "py3", enabled: bool = True) -> Image:
    return Image.objects.create(name=name, uri=f"/shared/images/{name}.tar", digest=DIGEST, enabled=enabled)


@pytest.mark.parametrize("field, value", [
    ("name", "-bad"), ("name", "has space"), ("name", ""), ("uri", "relative/path.tar"), ("uri", "/x\n.tar"),
    ("digest", "sha256:abc"), ("digest", "md5:" + "ab" * 16), ("digest", "sha256:" + "AB" * 32),
])
def test_registration_refuses_bad_fields_by_name(field: str, value: str) -> None:
    image = Image(name="py3", uri="/shared/py3.tar", digest=DIGEST)
    setattr(image, field, value)
    with pytest.raises(ValidationError) as caught:
        image.full_clean()
    assert field in caught.value.message_dict


def test_a_job_naming_an_enabled_image_stores_it_and_its_launch_carries_it(alice, nodes, sent,
                                                                        django_capture_on_commit_callbacks) -> None:
    nodes(("n1", 1))
    image = make_image()
    job = submit(alice, image="py3")
    assert job.image == image
    with django_capture_on_commit_callbacks(execute=True):
        loop.run_cycle()
    ((node, kw),) = sent.launches
    assert (kw["image"], kw["image_uri"], kw["image_digest"]) == ("py3", "/shared/images/py3.tar", DIGEST)
    assert kw["run_as"] == "alice"
    assert protocol.LaunchCommand.from_kwargs(kw).image == "py3"  # a launch the agent accepts


def test_a_job_without_image_launches_on_the_nodes_root(alice, nodes, sent, django_capture_on_commit_callbacks) -> None:
    nodes(("n1", 1))
    submit(alice)
    with django_capture_on_commit_callbacks(execute=True):
        loop.run_cycle()
    ((_, kw),) = sent.launches
    assert (kw["image"], kw["image_uri"], kw["image_digest"]) == ("", "", "")


@pytest.mark.parametrize("name, says", [("nope", "No image is registered as 'nope'"), ("old", "'old' is disabled")])
def test_unknown_or_disabled_images_are_refused_naming_the_field(alice, name: str, says: str) -> None:
    make_image("old", enabled=False)
    with pytest.raises(JobRequestInvalid) as caught:
        submit(alice, image=name)
    assert says in caught.value.errors["image"][0]
    assert not Job.objects.exists()


def test_an_array_names_the_job_whose_image_is_refused(alice) -> None:
    make_image()
    reqs = [JobRequest(name="a", command="true", image="py3"), JobRequest(name="b", command="true", image="nope")]
    with pytest.raises(JobArrayInvalid) as caught:
        submit_jobs(alice, reqs)
    assert list(caught.value.errors) == [1] and "image" in caught.value.errors[1]
    assert not Job.objects.exists()


def _unavailable(job: Job, node: str, message: str = "sha256 mismatch") -> str | None:
    job.refresh_from_db()
    now = timezone.now()
    return reports.attempt_exited(
        node, job.pk, job.attempt_count, exit_code=None, signal=None, ended_at=now, notice_at=None,
        checkpointed=False, reason=protocol.EXIT_IMAGE_UNAVAILABLE, now=now, message=message)


def _start(capture: Any) -> None:
    with capture(execute=True):
        loop.run_cycle()


def test_an_unavailable_image_excludes_the_node_and_the_job_starts_elsewhere(
        alice, nodes, sent, no_triggers, django_capture_on_commit_callbacks) -> None:
    nodes(("n1", 1), ("n2", 1))
    make_image()
    job = submit(alice, image="py3")
    _start(django_capture_on_commit_callbacks)
    ((first, _),) = sent.launches
    assert _unavailable(job, first) == AttemptState.IMAGE_UNAVAILABLE
    job.refresh_from_db()
    attempt = Attempt.objects.get(job=job, number=1)
    assert attempt.state == AttemptState.IMAGE_UNAVAILABLE and attempt.message == f"{first}: sha256 mismatch"
    assert job.state == JobState.PENDING and job.pending_reason == "ImageUnavailable"
    assert f"image py3 unavailable on {first}: sha256 mismatch" in job.pending_message
    assert job.excluded_nodes == [first]
    sent.clear()
    _start(django_capture_on_commit_callbacks)
    ((second, kw),) = sent.launches
    assert second != first and kw["attempt"] == 2


def test_a_job_whose_image_no_node_has_is_held_and_an_admin_save_releases_it(
        alice, nodes, sent, no_triggers, django_capture_on_commit_callbacks) -> None:
    nodes(("n1", 1))
    image = make_image()
    job = submit(alice, image="py3")
    _start(django_capture_on_commit_callbacks)
    _unavailable(job, "n1")
    sent.clear()
    _start(django_capture_on_commit_callbacks)
    job.refresh_from_db()
    assert sent.launches == []
    assert job.state == JobState.PENDING and job.pending_reason == "ImageUnavailable"
    assert "held until an administrator fixes the image" in job.pending_message
    assert clear_image_exclusions(image) == 1
    _start(django_capture_on_commit_callbacks)
    assert [node for node, _ in sent.launches] == ["n1"]
