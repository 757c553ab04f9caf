"""What a launch tells the node to confine a job with: its stored user (none in single-user mode), its CPU and
memory limits, its image."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User

from scheduler import confinement
from scheduler.models import Job


@pytest.mark.django_db
def test_launch_fields_carry_the_stored_user_and_the_requested_limits(settings) -> None:
    owner = User.objects.create_user("alice")
    job = Job.objects.create(owner=owner, name="j", command="true", num_gpus=1, num_cpus=2.5, mem_gb=1.5,
                             run_as="alice")
    assert confinement.launch_fields([job.pk]) == {
        job.pk: {"run_as": "alice", "cpus": 2.5, "mem_bytes": 3 * 2**29, "image": "", "image_uri": "",
                 "image_digest": ""}}
    settings.GPUSCHED_SINGLE_USER = True
    assert confinement.launch_fields([job.pk])[job.pk]["run_as"] == ""
    assert confinement.launch_fields([]) == {}
