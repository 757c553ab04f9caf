"""The audit log in the admin: active staff read it, with filters; nobody adds, changes or deletes.

``AuditedAdmin`` is the mixin other admins use to record their saves and deletions.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from audit import services
from audit.models import AuditEntry


@admin.register(AuditEntry)
class AuditEntryAdmin(admin.ModelAdmin):
    list_display = ["at", "actor_name", "ip", "action", "target", "changes", "detail"]
    list_filter = ["action", "actor_name", "at"]
    search_fields = ["actor_name", "target", "detail"]
    date_hierarchy = "at"
    readonly_fields = [f.name for f in AuditEntry._meta.fields]

    def has_module_permission(self, request: HttpRequest) -> bool:
        return request.user.is_active and request.user.is_staff

    def has_view_permission(self, request: HttpRequest, obj=None) -> bool:  # noqa: ANN001
        return self.has_module_permission(request)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:  # noqa: ANN001
        return False

    def has_delete_permission(self, request: HttpRequest, obj=None) -> bool:  # noqa: ANN001
        return False


class AuditedAdmin:
    """Records every save and deletion made through this admin: ``audit_action`` + ``.changed``/``.deleted``."""

    audit_action = ""

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        before = services.snapshot(type(obj).objects.filter(pk=obj.pk).first()) if change and obj.pk else {}
        super().save_model(request, obj, form, change)  # type: ignore[misc]
        changes = services.changed_fields(before, services.snapshot(obj))
        if changes:
            services.record(f"{self.audit_action}.changed", target=str(obj), actor=request.user, request=request,
                            changes=changes, detail="added" if not change else "")

    def delete_model(self, request: HttpRequest, obj: Any) -> None:
        before, target = services.snapshot(obj), str(obj)
        super().delete_model(request, obj)  # type: ignore[misc]
        services.record(f"{self.audit_action}.deleted", target=target, actor=request.user, request=request,
                        changes={k: [v, None] for k, v in before.items()})

    def delete_queryset(self, request: HttpRequest, queryset: Any) -> None:
        for obj in list(queryset):
            self.delete_model(request, obj)
