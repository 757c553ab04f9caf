"""``gpusched submit --project``: the job is charged to the project named, and a project the user is
not a member of is refused naming the field, with nothing written."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.django_db(transaction=True)


def test_cli_submit_charges_the_project_or_refuses_naming_it(roles, live_server, token_for, run_cli) -> None:  # noqa: ANN001
    from scheduler.models import Job
    from scheduler.projects import Membership, Project

    vision = Project.objects.create(name="vision")
    Membership.objects.create(project=vision, user=roles.owner)
    Project.objects.create(name="nlp")
    env = {"GPUSCHED_URL": live_server.url, "GPUSCHED_TOKEN": token_for(roles.owner)}
    code, out, err = run_cli("submit", "--project", "nlp", "--", "true", env=env)
    assert (code, out) == (1, "")
    assert err.startswith("gpusched: error: HTTP 400 Bad Request: project: ")
    assert 'not a member of project "nlp"' in err
    assert not Job.objects.exists()
    code, out, err = run_cli("submit", "--project", "vision", "--", "true", env=env)
    assert (code, err) == (0, "")
    assert Job.objects.get().project == vision
    code, out, _ = run_cli("show", str(Job.objects.get().pk), env=env)
    assert code == 0 and "vision" in out
