"""Admin of projects: their description, share, priority range, members and each member's default.

Active staff look; superusers add, change and delete (a project's share decides
who gets the cluster, like the identities and images beside it). Members are
edited inline on the project's page; a user has at most one default project
(the database refuses a second one).
"""

from __future__ import annotations

from django.contrib import admin
from django.db.models import Count

from audit import services as audit
from audit.admin import AuditedAdmin
from scheduler.identity_admin import SuperuserMayChange
from scheduler.projects import Membership, Project


class MembershipInline(SuperuserMayChange, admin.TabularInline):
    model = Membership
    extra = 1
    fields = ["user", "is_default"]
    autocomplete_fields = ["user"]


@admin.register(Project)
class ProjectAdmin(AuditedAdmin, SuperuserMayChange, admin.ModelAdmin):
    audit_action = "project"
    list_display = ["name", "share", "member_count", "min_priority", "max_priority", "description"]
    search_fields = ["name", "description", "memberships__user__username"]
    inlines = [MembershipInline]
    fieldsets = [
        (None, {"fields": ["name", "description"]}),
        ("Fair share", {"fields": ["share"]}),
        ("Priority range its jobs may ask for (empty: no narrower limit)", {"fields": ["min_priority",
                                                                                   "max_priority"]}),
    ]

    def save_related(self, request, form, formsets, change: bool) -> None:  # noqa: ANN001
        """Save the members inline, and audit who was added, removed or made default (the project's
        own fields are audited by ``AuditedAdmin``)."""
        project = form.instance
        before = _members(project)
        super().save_related(request, form, formsets, change)
        after = _members(project)
        if before != after:
            audit.record("project.changed", target=str(project), actor=request.user, request=request,
                         changes={"members": [before, after]})

    def get_queryset(self, request):  # noqa: ANN001, ANN201
        return super().get_queryset(request).annotate(_members=Count("memberships"))

    @admin.display(description="members", ordering="_members")
    def member_count(self, project: Project) -> int:
        return project._members  # noqa: SLF001 - the annotation above


def _members(project: Project) -> list[str]:
    """The project's members as ``username`` (``username*`` for one whose default it is), sorted."""
    rows = Membership.objects.filter(project=project).values_list("user__username", "is_default")
    return sorted(f"{name}*" if default else name for name, default in rows)
