"""The projects' admin: superusers add projects with members and a default, staff only look, and
every change is audited."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User

from audit.models import AuditEntry
from scheduler.projects import Membership, Project

pytestmark = pytest.mark.django_db


def _add_form(user_pk: int, **extra) -> dict:  # noqa: ANN003
    return {
        "name": "vision", "description": "image models", "share": "2.5", "min_priority": "", "max_priority": "",
        "memberships-TOTAL_FORMS": "1", "memberships-INITIAL_FORMS": "0", "memberships-MIN_NUM_FORMS": "0",
        "memberships-MAX_NUM_FORMS": "1000", "memberships-0-user": str(user_pk), "memberships-0-is_default": "on",
        **extra,
    }


def test_a_superuser_adds_a_project_with_a_default_member_and_it_is_audited(roles, browser_as):
    root = User.objects.create_superuser("root-admin", "r@example.org", "pw-long-enough-42")
    response = browser_as(root).post("/admin/scheduler/project/add/", _add_form(roles.owner.pk))
    assert response.status_code == 302, response.content.decode()[:2000]
    project = Project.objects.get(name="vision")
    assert project.share == 2.5
    assert Membership.objects.get(project=project).user == roles.owner
    assert Membership.objects.get(project=project).is_default
    changes = list(AuditEntry.objects.filter(action="project.changed", target="vision").values_list("changes",
                                                                                                   flat=True))
    assert len(changes) == 2 and {"members": [[], ["alice*"]]} in changes
    listing = browser_as(root).get("/admin/scheduler/project/").content.decode()
    assert "vision" in listing


def test_a_bad_name_or_share_is_refused_on_its_field(roles, browser_as):
    root = User.objects.create_superuser("root-admin", "r@example.org", "pw-long-enough-42")
    response = browser_as(root).post("/admin/scheduler/project/add/",
                                     _add_form(roles.owner.pk, name="Vision Team", share="0"))
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert set(errors) == {"name", "share"}
    assert not Project.objects.exists()


def test_staff_may_look_but_not_change_and_others_not_at_all(roles, browser_as):
    project = Project.objects.create(name="vision")
    assert browser_as(roles.staff).get("/admin/scheduler/project/").status_code == 200
    assert browser_as(roles.staff).post("/admin/scheduler/project/add/", _add_form(roles.owner.pk)).status_code == 403
    changed = browser_as(roles.staff).post(f"/admin/scheduler/project/{project.pk}/change/",
                                           _add_form(roles.owner.pk, name="vision", share="9"))
    assert changed.status_code == 403
    assert Project.objects.get().share == 1.0
    assert browser_as(roles.owner).get("/admin/scheduler/project/").status_code == 302
    assert browser_as(None).get("/admin/scheduler/project/").status_code == 302
