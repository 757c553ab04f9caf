"""The CLI shows the server's refusal of a submission from a user without a POSIX identity."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.django_db(transaction=True)


def test_cli_submit_without_identity_fails_naming_it(live_server, token_for, run_cli) -> None:  # noqa: ANN001
    from django.contrib.auth.models import User

    from scheduler.models import Job

    user = User.objects.create_user("Dana@Example.org")
    env = {"GPUSCHED_URL": live_server.url, "GPUSCHED_TOKEN": token_for(user)}
    code, out, err = run_cli("submit", "--", "true", env=env)
    assert code != 0 and out == ""
    assert "identity" in err and "no POSIX identity" in err
    assert not Job.objects.exists()
