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


@pytest.mark.django_db
def test_a_session_launch_names_its_kind_and_the_servers_sealing_key_in_the_env_and_a_batch_launch_has_no_env(
        settings) -> None:  # noqa: ANN001
    from cluster import protocol, session_contract, session_seal

    owner = User.objects.create_user("alice")
    session = Job.objects.create(owner=owner, name="s", command="jupyter lab", num_gpus=1, session_kind="jupyter")
    batch = Job.objects.create(owner=owner, name="b", command="true", num_gpus=1)
    fields = confinement.launch_fields([session.pk, batch.pk])
    assert fields[session.pk]["env"] == {session_contract.ENV_SESSION: "jupyter",
                                         session_contract.ENV_SESSION_REPORT_KEY: session_seal.public_key_text(
                                             settings.SECRET_KEY)}
    assert "env" not in fields[batch.pk]
    cmd = protocol.LaunchCommand(job_id=session.pk, attempt=1, command="x", **fields[session.pk])
    assert session_contract.session_kind(protocol.LaunchCommand.from_kwargs(cmd.to_kwargs()).env) == "jupyter"
