"""Admin: API tokens (staff may revoke; keys are created on the tokens page only), and the quota form's
run-time limit typed as a duration, as the submission form and the command line take it."""

from __future__ import annotations

from django import forms
from django.contrib import admin
from django.http import HttpRequest
from django.utils import timezone

from portal.cli.units import format_duration
from portal.forms import MAX_TIME_LIMIT_S, DurationField
from portal.models import ApiToken
from scheduler.admin import QuotaAdmin, StaffMayView
from scheduler.models import Quota


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


class RunTimeField(DurationField):
    """A stored number of seconds shown as the clock form it is typed in (5400 -> ``1:30:00``)."""

    def prepare_value(self, value: object) -> object:
        return format_duration(value) if isinstance(value, int) else value


class QuotaForm(forms.ModelForm):
    max_te_runtime = RunTimeField(
        min_value=1, max_value=MAX_TIME_LIMIT_S, required=False, label="Max TE run time",
        help_text="Longest TE time limit: seconds, or 90m, 2h, 1d, HH:MM:SS, D-HH:MM:SS; a TE job without "
                  "a time limit gets this one.")

    class Meta:
        model = Quota
        fields = "__all__"


# The scheduler's quota admin, given the web face's duration field (the scheduler does not import portal).
admin.site.unregister(Quota)


@admin.register(Quota)
class QuotaWithDurationsAdmin(QuotaAdmin):
    form = QuotaForm

    def get_list_display(self, request: HttpRequest) -> list:
        return ["te_run_time" if column == "max_te_runtime" else column
                for column in super().get_list_display(request)]

    @admin.display(description="Max TE run time", ordering="max_te_runtime")
    def te_run_time(self, quota: Quota) -> str:
        return format_duration(quota.max_te_runtime) if quota.max_te_runtime else "-"
