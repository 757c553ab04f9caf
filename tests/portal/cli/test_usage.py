"""``gpusched usage`` against the live portal: the table, CSV and a bad date."""

from __future__ import annotations

import re

import pytest

from tests.portal.api.test_views_usage import charged  # noqa: F401 - fixture

pytestmark = pytest.mark.django_db(transaction=True)


def test_usage_table_csv_and_bad_input(roles, live_server, token_for, run_cli, charged) -> None:  # noqa: ANN001, F811
    env = {"GPUSCHED_URL": live_server.url, "GPUSCHED_TOKEN": token_for(roles.owner)}
    code, out, err = run_cli("usage", env=env)
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert re.fullmatch(r"Usage from \d{4}-\d\d-\d\d \d\d:\d\d:\d\d to \d{4}-\d\d-\d\d \d\d:\d\d:\d\d by project", lines[0])
    assert lines[1].split() == ["PROJECT", "CLASS", "GPU-HOURS", "JOBS", "PREEMPTIONS", "LOST", "GPU-HOURS", "SHARE"]
    assert lines[2].split()[:3] == ["vision", "BE", "2"] and "nlp" not in out
    assert lines[-1] == "Total: 2.00 GPU-hours, 1 job, 0 preemptions, 0.00 GPU-hours lost"
    code, out, _ = run_cli("usage", "--by", "user", "--csv", env=env)
    assert code == 0 and out.splitlines() == ["user,job_class,gpu_hours,jobs,preemptions,lost_gpu_hours",
                                              "alice,BE,2.0,1,0,0.0"]
    code, out, err = run_cli("usage", "--from", "last-week", env=env)
    assert (code, out) == (1, "")
    assert "from: " in err and "not a date" in err


def test_share_table_and_json(roles, live_server, token_for, run_cli, charged) -> None:  # noqa: ANN001, F811
    env = {"GPUSCHED_URL": live_server.url, "GPUSCHED_TOKEN": token_for(roles.owner)}
    code, out, err = run_cli("share", env=env)
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0].startswith("Fair share off") and "half-life 1 h" in lines[0]
    assert lines[1].split()[:3] == ["PROJECT", "SHARE", "NORM"]
    assert [line.split()[0] for line in lines[2:]] == ["vision"]  # nlp is not the owner's project
    code, out, _ = run_cli("--json", "share", env=env)
    assert code == 0 and '"project": "vision"' in out
    code, out, _ = run_cli("share", env={**env, "GPUSCHED_TOKEN": token_for(roles.other)})
    assert (code, out.splitlines()[-1]) == (0, "No project of yours holds, wants or has used GPUs.")


@pytest.mark.parametrize(("seconds", "text"), [(3600, "1 h"), (600, "10 min"), (5400, "1.5 h"), (604800, "7 d"),
                                               (45, "45 s"), (4000, "1.11 h"), (0.5, "0.5 s")])
def test_the_half_life_is_written_in_the_largest_unit_it_fills(seconds: float, text: str) -> None:
    from portal.cli.usage import short_duration

    assert short_duration(seconds) == text
