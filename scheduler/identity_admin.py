"""Admin of POSIX identities and images: staff look, superusers change.

Setting a user's POSIX name decides whose files that user's jobs can read on
the nodes, and an image decides what every job naming it runs, so only
superusers add, change or delete them (quotas, by contrast, any active staff
member manages).
"""

from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest

from audit.admin import AuditedAdmin
from scheduler import services
from scheduler.identity import PosixIdentity
from scheduler.images import Image


class SuperuserMayChange:
    """Active staff may look; active superusers may also add, change and delete."""

    def has_module_permission(self, request: HttpRequest) -> bool:
        return request.user.is_active and request.user.is_staff

    def has_view_permission(self, request: HttpRequest, obj=None) -> bool:  # noqa: ANN001
        return self.has_module_permission(request)

    def _superuser(self, request: HttpRequest) -> bool:
        return request.user.is_active and request.user.is_superuser

    def has_add_permission(self, request: HttpRequest, *args) -> bool:
        return self._superuser(request)

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:  # noqa: ANN001
        return self._superuser(request)

    def has_delete_permission(self, request: HttpRequest, obj=None) -> bool:  # noqa: ANN001
        return self._superuser(request)


@admin.register(PosixIdentity)
class PosixIdentityAdmin(AuditedAdmin, SuperuserMayChange, admin.ModelAdmin):
    audit_action = "identity"
    list_display = ["user", "posix_name", "note", "updated_at"]
    search_fields = ["user__username", "posix_name", "note"]
    autocomplete_fields = ["user"]
    readonly_fields = ["updated_at"]


@admin.register(Image)
class ImageAdmin(AuditedAdmin, SuperuserMayChange, admin.ModelAdmin):
    """Images jobs may run in. Saving one gives every node another chance at it: the
    exclusions its pending jobs collected (nodes where it was unavailable) are cleared."""

    audit_action = "image"
    list_display = ["name", "enabled", "uri", "digest", "note", "updated_at"]
    list_filter = ["enabled"]
    search_fields = ["name", "uri", "note"]
    readonly_fields = ["updated_at"]

    def save_model(self, request: HttpRequest, obj: Image, form, change: bool) -> None:  # noqa: ANN001
        super().save_model(request, obj, form, change)
        if change:
            services.clear_image_exclusions(obj)
