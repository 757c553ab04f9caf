"""The usage page (/usage/) and its CSV download (/usage/csv/): visibility, charts served locally, bad input."""

from __future__ import annotations

import re

import pytest

from tests.portal.api.test_views_usage import charged  # noqa: F401 - fixture
from tests.support.web import remote_assets

pytestmark = pytest.mark.django_db


def test_the_page_shows_a_members_projects_with_the_chart_table_and_quotas(roles, browser_as, charged):  # noqa: F811
    response = browser_as(roles.owner).get("/usage/")
    assert response.status_code == 200
    page = response.content.decode()
    assert [row["name"] for row in response.context["rows"]] == ["vision"]
    assert "nlp" not in page.split('id="usage-report"')[0]
    assert 'id="usage-area"' in page and 'id="usage-quota"' in page
    assert "/static/dashboard/vendor/plotly.min.js" in page and remote_assets(page) == []
    assert 'href="/usage/csv/?' in page


def test_staff_see_every_project_and_others_none(roles, browser_as, charged):  # noqa: F811
    staff = browser_as(roles.staff).get("/usage/", {"by": "project"})
    assert sorted(row["name"] for row in staff.context["rows"]) == ["nlp", "vision"]
    other = browser_as(roles.other).get("/usage/")
    assert other.context["rows"] == [] and "No usage in this period." in other.content.decode()


def test_the_fair_share_table_shows_the_viewers_projects_only(roles, browser_as, charged):  # noqa: F811
    owner = browser_as(roles.owner).get("/usage/")
    assert [row["project"] for row in owner.context["standing"]["rows"]] == ["vision"]
    table = owner.content.decode().split('id="fair-share"')[1].split("</table>")[0]
    assert "<td>vision</td>" in table and "nlp" not in table
    assert "Fair share is off" in owner.content.decode()
    assert "usage counts half after 1:00:00 (3600 s);" in owner.content.decode()  # the default half-life
    staff = browser_as(roles.staff).get("/usage/")
    assert sorted(row["project"] for row in staff.context["standing"]["rows"]) == ["nlp", "vision"]
    other = browser_as(roles.other).get("/usage/").content.decode()
    assert "No project of yours holds, wants or has used GPUs." in other


def test_anonymous_goes_to_the_login_page(browser_as):
    assert browser_as(None).get("/usage/").status_code == 302
    assert browser_as(None).get("/usage/csv/").status_code == 302


def test_bad_input_is_named_and_the_csv_follows_the_page(roles, browser_as, charged):  # noqa: F811
    bad = browser_as(roles.owner).get("/usage/", {"to": "<script>alert(1)</script>"})
    assert bad.status_code == 400
    assert "to: " in bad.content.decode() and "<script>alert" not in bad.content.decode()
    assert browser_as(roles.owner).get("/usage/csv/", {"by": "x"}).json() == {
        "errors": {"by": ["'x' is not one of: project, user."]}}
    csv = browser_as(roles.owner).get("/usage/csv/").content.decode().splitlines()
    assert csv[0].startswith("project,") and [line.split(",")[0] for line in csv[1:]] == ["vision"]


def test_the_quota_table_names_each_limit_in_words_and_shows_a_run_time_as_a_duration(roles, browser_as):
    from scheduler.models import Quota

    Quota.objects.create(user=roles.owner, max_gpus=4, max_te_runtime=5400)
    page = browser_as(roles.owner).get("/usage/").content.decode()
    table = page.split('id="usage-quota"')[1].split("</table>")[0]
    rows = [" ".join(re.sub(r"<[^>]+>", " ", row).split()) for row in table.split("<tr>")[2:]]
    assert "GPUs at once, all jobs max_gpus 4 0" in rows
    assert "Longest TE time limit max_te_runtime 1:30:00 (5400 s) -" in rows
    assert "GPUs of the largest TE job max_te_job_gpus no limit -" in rows
