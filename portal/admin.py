"""Admin: API tokens (staff may revoke; keys are created on the tokens page only)."""

from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest
from django.utils import timezone

from portal.models import ApiToken
from scheduler.admin import StaffMayView


@admin.register(ApiToken)
class ApiTokenAdmin(StaffMayView, admin.ModelAdmin):
    list_display = ["name", "user", "prefix", "created", "last_used", "revoked"]
    list_filter = [("revoked", admin.EmptyFieldListFilter)]
    search_fields = ["name", "user__username", "prefix"]
    readonly_fields = ["user", "name", "prefix", "created", "last_used", "revoked"]
    exclude = ["key_hash"]
    actions = ["revoke"]

    @admin.action(description="Revoke selected tokens")
    def revoke(self, request: HttpRequest, queryset) -> None:  # noqa: ANN001
        count = queryset.filter(revoked__isnull=True).update(revoked=timezone.now())
        self.message_user(request, f"{count} token(s) revoked.")
