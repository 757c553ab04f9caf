"""Fixtures for tests of the web face and the services below it: users in three roles, authenticated
clients, jobs and nodes.

Django objects are imported inside the fixtures so that collecting this
directory never needs the app registry early.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

PASSWORD = "a-long-test-password-42"


@dataclass
class Roles:
    owner: Any
    other: Any
    staff: Any


@pytest.fixture
def roles(db) -> Roles:  # noqa: ANN001
    """Three users: a job owner, another plain user and a staff member (not superuser)."""
    from django.contrib.auth.models import User

    return Roles(
        owner=User.objects.create_user("alice", "alice@example.org", PASSWORD),
        other=User.objects.create_user("bob", "bob@example.org", PASSWORD),
        staff=User.objects.create_user("carol", "carol@example.org", PASSWORD, is_staff=True),
    )


@pytest.fixture
def token_for(db) -> Callable[[Any], str]:  # noqa: ANN001
    """``token_for(user)``: a fresh API key for ``user``."""
    from portal.models import ApiToken

    def make(user: Any) -> str:
        return ApiToken.issue(user, f"test token of {user.username}")[1]

    return make


@pytest.fixture
def api_as(token_for) -> Callable[[Any], Any]:  # noqa: ANN001
    """``api_as(user)``: a DRF client sending ``Authorization: Token <key>`` (``None``: anonymous)."""
    from rest_framework.test import APIClient

    def make(user: Any | None) -> APIClient:
        client = APIClient()
        if user is not None:
            client.credentials(HTTP_AUTHORIZATION=f"Token {token_for(user)}")
        return client

    return make


@pytest.fixture
def browser_as(db) -> Callable[[Any], Any]:  # noqa: ANN001
    """``browser_as(user)``: a Django test client logged in through the session (``None``: anonymous)."""
    from django.test import Client

    def make(user: Any | None, *, enforce_csrf: bool = False) -> Client:
        client = Client(enforce_csrf_checks=enforce_csrf)
        if user is not None:
            client.force_login(user)
        return client

    return make


@pytest.fixture
def make_job(db) -> Callable[..., Any]:  # noqa: ANN001
    """``make_job(owner, state=..., **fields)``: a job row in any state, with its submission event.

    Jobs in a state past PENDING get one attempt (on node ``n1``) as the
    scheduling loop would have written it.
    """
    from django.utils import timezone

    from scheduler.models import Attempt, AttemptState, Job, JobEvent, JobState

    def make(owner: Any, state: str = JobState.PENDING, **fields: Any) -> Job:
        values = {"name": "job", "command": "python train.py", "num_gpus": 1, **fields}
        job = Job.objects.create(owner=owner, state=state, **values)
        JobEvent.objects.create(job=job, to_state=JobState.PENDING, reason="Submitted")
        if state != JobState.PENDING:
            now = timezone.now()
            running = state in {JobState.STARTING, JobState.RUNNING, JobState.PREEMPTING, JobState.CANCELLING}
            Attempt.objects.create(
                job=job, number=1, gpu_allocation={"n1": list(range(job.num_gpus))},
                state=AttemptState.RUNNING if running else AttemptState.COMPLETED,
                started_at=now, ended_at=None if running else now,
            )
            Job.objects.filter(pk=job.pk).update(attempt_count=1, started_at=now, first_started_at=now)
            JobEvent.objects.create(job=job, from_state=JobState.PENDING, to_state=state)
            job.refresh_from_db()
        return job

    return make


@pytest.fixture
def make_node(db) -> Callable[..., Any]:  # noqa: ANN001
    """``make_node(name, gpus)``: a registered UP node with ``gpus`` GPU rows."""
    from cluster.models import Gpu, Node

    def make(name: str, gpus: int, **fields: Any) -> Node:
        node = Node.objects.create(name=name, gpus=gpus, cpus=32, mem_gb=256, **fields)
        Gpu.objects.bulk_create(Gpu(node=node, index=i, model_name="Virtual GPU", memory_mb=16384) for i in range(gpus))
        return node

    return make


@pytest.fixture
def password() -> str:
    """The password of every user made by ``roles``."""
    return PASSWORD


def remote_assets(html: str) -> list[str]:
    """The script, style and image addresses of a page that point off this server.

    A page must load everything it needs from its own /static/; checking the addresses (rather
    than searching the page for a CDN's name) keeps random tokens in the page from matching.
    """
    import re

    addresses = re.findall(r'(?:src|href)\s*=\s*["\']([^"\']+)["\']', html, flags=re.IGNORECASE)
    return [a for a in addresses if re.match(r"^(?:[a-z][a-z0-9+.-]*:)?//", a, flags=re.IGNORECASE)]
