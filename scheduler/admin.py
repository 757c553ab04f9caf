"""Admin: every job (read-only, with a cancel action) and quotas with usage beside each limit.

Any active staff member may view jobs and manage quotas; jobs change state
only through the services, never by editing a row here.
"""

from __future__ import annotations

from collections.abc import Callable

from django.contrib import admin, messages
from django.db.models import Q
from django.http import HttpRequest
from django.utils import timezone
from django.utils.html import format_html, format_html_join

from audit import services as audit
from audit.admin import AuditedAdmin
from scheduler import holds, selectors, services
from scheduler.core.arrays import parse_task
from scheduler.core.decisions import Reason
from scheduler.models import Attempt, Job, JobEvent, PendingReason, Quota
from scheduler.quotas import Scope, Usage


class StaffMayManage:
    """Grant active staff full rights on this model (no per-model permission needed)."""

    def has_module_permission(self, request: HttpRequest) -> bool:
        return request.user.is_active and request.user.is_staff

    def has_view_permission(self, request: HttpRequest, obj=None) -> bool:  # noqa: ANN001
        return self.has_module_permission(request)

    def has_add_permission(self, request: HttpRequest, *args) -> bool:
        return self.has_module_permission(request)

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:  # noqa: ANN001
        return self.has_module_permission(request)

    def has_delete_permission(self, request: HttpRequest, obj=None) -> bool:  # noqa: ANN001
        return self.has_module_permission(request)


class StaffMayView(StaffMayManage):
    """Active staff may look; nobody edits, adds or deletes here."""

    def has_add_permission(self, request: HttpRequest, *args) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:  # noqa: ANN001
        return False

    def has_delete_permission(self, request: HttpRequest, obj=None) -> bool:  # noqa: ANN001
        return False


class AttemptInline(StaffMayView, admin.TabularInline):
    model = Attempt
    extra = 0
    fields = ["number", "state", "gpu_allocation", "started_at", "ended_at", "exit_code", "signal", "notice_at",
              "vacated_at", "checkpointed", "lost_gpu_seconds", "peak_mem_bytes", "cpu_seconds", "message"]
    readonly_fields = fields


class JobEventInline(StaffMayView, admin.TabularInline):
    model = JobEvent
    extra = 0
    fields = ["at", "from_state", "to_state", "reason", "message"]
    readonly_fields = fields


#: Why a job starts, stops or changes, not why it waits.
_ACTIONS = {Reason.SCHEDULED, Reason.PREEMPTED_FOR_TE, Reason.PREEMPTED_FOR_PRIORITY, Reason.SHRUNK_FOR_JOB,
            Reason.GROWN, Reason.PLAN_CHANGED}
#: Every reason a job may wait for.
PENDING_REASONS = sorted(({*PendingReason.values} | {r.value for r in Reason if r not in _ACTIONS}) - {""})


class PendingReasonFilter(admin.SimpleListFilter):
    """The reasons a job may wait for, as the code knows them, instead of those found in every job row."""

    title = "pending reason"
    parameter_name = "pending_reason__exact"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin) -> list[tuple[str, str]]:
        return [(reason, reason) for reason in PENDING_REASONS]

    def queryset(self, request: HttpRequest, queryset):  # noqa: ANN001, ANN201 - a Job queryset
        return queryset.filter(pending_reason=self.value()) if self.value() else queryset


@admin.register(Job)
class JobAdmin(StaffMayView, admin.ModelAdmin):
    # Compact columns: at 1400 px the admin's navigation and filter sidebars leave the list about 740 px,
    # where the default "Dec. 2, 2026, 1:10 a.m." (kept on one line) pushed the last column out of view.
    list_display = ["id", "name", "owner", "job_class", "gpus", "state", "pending_reason", "submitted"]
    # At 300,000 jobs the date hierarchy's DISTINCT over every submission date, the pending reasons' DISTINCT
    # and the second COUNT of every row took 0.18 s of each 0.28 s load of the list; none of these filters
    # reads the table to offer its choices.
    list_filter = ["state", "job_class", PendingReasonFilter, "hold", ("submitted_at", admin.DateFieldListFilter)]
    show_full_result_count = False
    search_fields = ["name", "owner__username", "command"]
    search_help_text = "A job id (12, or 12_3 for one task of an array), as squeue -j; other text: name, owner, command."
    list_select_related = ["owner"]
    inlines = [AttemptInline, JobEventInline]
    actions = ["cancel_jobs", "hold_jobs", "release_jobs"]

    def get_search_results(self, request: HttpRequest, queryset, search_term: str):  # noqa: ANN001, ANN201
        """A job id finds that job and the tasks of the array it heads, and ``ID_INDEX`` that task, through
        the primary key and the array index, as ``squeue -j`` does; any other text searches the names,
        owners and commands (a scan of every job: 0.65 s at 300,000)."""
        parsed = parse_task(search_term.strip())
        if parsed is None:
            return super().get_search_results(request, queryset, search_term)
        array_id, index = parsed
        if index is None:
            return queryset.filter(Q(pk=array_id) | Q(array_id=array_id)), False
        return queryset.filter(array_id=array_id, array_index=index), False

    @admin.display(description="GPUs", ordering="num_gpus")
    def gpus(self, job: Job) -> int:
        return job.num_gpus

    @admin.display(description="submitted", ordering="submitted_at")
    def submitted(self, job: Job) -> str:
        return timezone.localtime(job.submitted_at).strftime("%Y-%m-%d %H:%M:%S")

    @admin.action(description="Cancel selected jobs")
    def cancel_jobs(self, request: HttpRequest, queryset) -> None:  # noqa: ANN001
        done, finished = 0, 0
        for job in queryset:
            try:
                services.cancel_job(job, request.user)
                audit.record_staff_cancel(request, job)
                done += 1
            except services.JobNotCancellable:
                finished += 1
        self.message_user(request, f"{done} job(s) cancelled or cancelling; {finished} had already finished.",
                          messages.SUCCESS if not finished else messages.WARNING)


    @admin.action(description="Hold selected pending jobs")
    def hold_jobs(self, request: HttpRequest, queryset) -> None:  # noqa: ANN001
        self._hold_change(request, queryset, holds.hold_job, "held")

    @admin.action(description="Release selected jobs")
    def release_jobs(self, request: HttpRequest, queryset) -> None:  # noqa: ANN001
        self._hold_change(request, queryset, holds.release_job, "released")

    def _hold_change(self, request: HttpRequest, queryset, change, done_text: str) -> None:  # noqa: ANN001
        """``scheduler.holds`` on each selected job (staff on another's job: an administrator's hold)."""
        done, refused = 0, 0
        for job in queryset:
            try:
                audit.record_staff_hold(request, change(job, request.user), change.__name__)
                done += 1
            except holds.HoldRefused:
                refused += 1
        self.message_user(request, f"{done} job(s) {done_text}; {refused} could not be (not pending, or ended).",
                          messages.SUCCESS if not refused else messages.WARNING)


class ScopeKindFilter(admin.SimpleListFilter):
    title = "scope"
    parameter_name = "scope"

    def lookups(self, request, model_admin):  # noqa: ANN001, ANN201
        return [("user", "user"), ("group", "group")]

    def queryset(self, request, queryset):  # noqa: ANN001, ANN201
        if self.value() == "user":
            return queryset.filter(user__isnull=False)
        if self.value() == "group":
            return queryset.filter(group__isnull=False)
        return queryset


#: Limits shown with usage: (limit field, usage attribute, column title).
_USAGE_COLUMNS = [
    ("max_gpus", "gpus", "GPUs held / max"),
    ("max_te_gpus", "te_gpus", "TE GPUs held / max"),
    ("gpu_hours_budget", "gpu_hours", "GPU-hours used / budget"),
    ("max_pending_jobs", "pending_jobs", "pending / max"),
]


def _used_of(usage: Usage, attr: str, limit) -> str:  # noqa: ANN001
    used = getattr(usage, attr)
    shown = f"{used:.1f}" if isinstance(used, float) else str(used)
    return f"{shown} / {'∞' if limit is None else limit}"


@admin.register(Quota)
class QuotaAdmin(AuditedAdmin, StaffMayManage, admin.ModelAdmin):
    audit_action = "quota"
    search_fields = ["user__username", "group__name", "note"]
    list_filter = [ScopeKindFilter, "group", "budget_period_days"]
    list_select_related = ["user", "group"]
    readonly_fields = ["current_usage"]
    fieldsets = [
        ("Scope (exactly one)", {"fields": ["user", "group", "note"]}),
        ("Limits (empty: no limit)", {"fields": ["max_gpus", "max_te_gpus", "max_te_job_gpus", "max_te_runtime",
                                                  "gpu_hours_budget", "budget_period_days", "max_pending_jobs"]}),
        ("Priority range a job may ask for (empty: the global range)", {"fields": ["min_priority", "max_priority"]}),
        ("Usage now", {"fields": ["current_usage"]}),
    ]

    def get_list_display(self, request: HttpRequest) -> list:
        snapshot = selectors.quota_usage()  # one snapshot per page, in a few queries
        columns: list = ["__str__"]
        for limit, attr, title in _USAGE_COLUMNS:
            columns.append(self._usage_column(snapshot.by_quota, limit, attr, title))
        return [*columns, "max_te_job_gpus", "max_te_runtime", "budget_period_days"]

    @staticmethod
    def _usage_column(by_quota: dict[int, Scope], limit: str, attr: str, title: str) -> Callable:
        def column(quota: Quota) -> str:
            scope = by_quota.get(quota.pk)
            return _used_of(scope.usage if scope else Usage(), attr, getattr(quota, limit))

        column.short_description = title
        return column

    @admin.display(description="Current usage")
    def current_usage(self, quota: Quota) -> str:
        if quota.pk is None:
            return "-"
        scope = selectors.quota_usage().by_quota.get(quota.pk)
        usage = scope.usage if scope else Usage()
        rows = [(title, _used_of(usage, attr, getattr(quota, limit))) for limit, attr, title in _USAGE_COLUMNS]
        body = format_html_join("", "<tr><th>{}</th><td>{}</td></tr>", rows)
        return format_html("<table>{}</table><p>GPU-hours over the last {} days; a group counts all its members.</p>",
                           body, quota.budget_period_days)


from scheduler import identity_admin  # noqa: E402, F401 - registers the POSIX identities' admin
from scheduler import projects_admin  # noqa: E402, F401 - registers the projects' admin
