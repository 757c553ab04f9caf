"""GET /api/v1/fairshare/: each role sees its projects' standing, and nothing it may not."""

from __future__ import annotations

import pytest

from tests.portal.api.test_views_usage import charged  # noqa: F401 - fixture

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("role, projects", [("owner", {"vision"}), ("other", set()), ("staff", {"vision", "nlp"})])
def test_each_role_sees_only_its_projects(roles, api_as, charged, role, projects):  # noqa: F811
    body = api_as(getattr(roles, role)).get("/api/v1/fairshare/").json()
    assert {r["project"] for r in body["rows"]} == projects
    assert set(body) == {"enabled", "half_life_s", "total_gpus", "computed_at", "rows"}


def test_a_row_carries_the_decayed_usage_and_the_factor(roles, api_as, charged):  # noqa: F811
    row = next(r for r in api_as(roles.staff).get("/api/v1/fairshare/").json()["rows"] if r["project"] == "vision")
    # 2 GPUs for an hour that ended an hour ago, half-life an hour: 2 * h/ln2 * (1/2 - 1/4) GPU-seconds.
    assert row["usage_gpu_hours"] == pytest.approx(2 / 0.6931471805599453 * 0.25, rel=1e-2)
    assert row["your_usage_gpu_hours"] == 0.0  # staff ran none of it
    assert 0.0 < row["fair_share_factor"] < 1.0 and row["held_gpus"] == 0


def test_anonymous_is_refused(api_as, charged):  # noqa: F811
    assert api_as(None).get("/api/v1/fairshare/").status_code == 401
