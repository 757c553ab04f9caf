"""manage.py advance_job_ids: ids issued after it are past the gap, whatever the sequence held."""

from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command

from scheduler.models import Job
from tests.support.live_helpers import make_user, submit

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]


def test_the_next_job_id_comes_after_the_gap() -> None:
    owner = make_user("restorer")
    before = submit(owner, name="before").pk
    out = io.StringIO()
    call_command("advance_job_ids", "--gap", "5000", stdout=out)
    after = submit(owner, name="after").pk
    assert after >= before + 5000
    assert f"above {before + 5000}" in out.getvalue()


def test_a_second_run_advances_again_even_with_no_new_job() -> None:
    owner = make_user("restorer2")
    first = submit(owner, name="first").pk
    call_command("advance_job_ids", "--gap", "100", stdout=io.StringIO())
    call_command("advance_job_ids", "--gap", "100", stdout=io.StringIO())
    assert submit(owner, name="second").pk >= first + 200


@pytest.mark.parametrize("gap", ["0", "-5"])
def test_a_gap_that_is_not_positive_is_refused_and_changes_nothing(gap: str) -> None:
    owner = make_user("restorer3")
    first = submit(owner, name="first").pk
    with pytest.raises(CommandError, match="--gap"):
        call_command("advance_job_ids", "--gap", gap, stdout=io.StringIO())
    assert submit(owner, name="next").pk == first + 1
    assert Job.objects.count() == 2
