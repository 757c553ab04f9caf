"""Admin: nodes and their GPUs, for staff to inspect and drain; GPU health and the GPU policy."""

from __future__ import annotations

from django.contrib import admin, messages
from django.db.models import Count, Q
from django.http import HttpRequest

from audit import services as audit
from audit.admin import AuditedAdmin
from audit.models import Action
from cluster import drain, gpu_health
from cluster.models import Gpu, GpuPolicy, Node
from scheduler.admin import StaffMayManage, StaffMayView


class GpuInline(StaffMayView, admin.TabularInline):
    model = Gpu
    extra = 0
    fields = ["index", "model_name", "memory_mb", "allocated_to", "healthy", "unhealthy_reason"]
    readonly_fields = fields


@admin.register(Node)
class NodeAdmin(StaffMayManage, admin.ModelAdmin):
    list_display = ["name", "state", "gpus", "free_gpus", "cpus", "mem_gb", "last_heartbeat", "agent_version"]
    list_filter = ["state"]
    search_fields = ["name"]
    readonly_fields = ["gpus", "cpus", "mem_gb", "last_heartbeat", "agent_version", "registered_at"]
    inlines = [GpuInline]
    actions = ["drain_nodes", "undrain_nodes"]

    def get_queryset(self, request):  # noqa: ANN001, ANN201
        return super().get_queryset(request).annotate(
            _free=Count("devices", filter=Q(devices__allocated_to__isnull=True))
        )

    @admin.display(description="free GPUs", ordering="_free")
    def free_gpus(self, node: Node) -> int:
        return node._free

    @admin.action(description="Drain selected nodes (no new jobs; running jobs finish)")
    def drain_nodes(self, request: HttpRequest, queryset) -> None:  # noqa: ANN001
        self._each(request, queryset, drain.drain, "draining")

    @admin.action(description="Return selected nodes to service")
    def undrain_nodes(self, request: HttpRequest, queryset) -> None:  # noqa: ANN001
        self._each(request, queryset, drain.undrain, "back in service")

    def _each(self, request: HttpRequest, queryset, action, done: str) -> None:  # noqa: ANN001
        for name in queryset.values_list("name", flat=True):
            try:
                action(name)
            except drain.DrainError as exc:
                self.message_user(request, str(exc), messages.ERROR)
            else:
                self.message_user(request, f"Node {name} is {done}.")


@admin.register(Gpu)
class GpuAdmin(StaffMayView, admin.ModelAdmin):
    """Every GPU with its health; unhealthy ones are returned to service with the action (audited)."""

    list_display = ["__str__", "model_name", "healthy", "unhealthy_reason", "unhealthy_since", "launch_failures",
                    "allocated_to"]
    list_filter = ["healthy", "node__state"]
    search_fields = ["node__name", "unhealthy_reason"]
    actions = ["return_to_service"]

    def get_queryset(self, request):  # noqa: ANN001, ANN201
        return super().get_queryset(request).select_related("node")

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:  # noqa: ANN001
        return obj is None and self.has_module_permission(request)  # the action, not the form

    @admin.action(description="Return selected GPUs to service")
    def return_to_service(self, request: HttpRequest, queryset) -> None:  # noqa: ANN001
        for node, index, reason in queryset.values_list("node__name", "index", "unhealthy_reason"):
            if gpu_health.return_to_service(node, index):
                audit.record(Action.GPU_RETURNED, target=f"GPU {node}:{index}", actor=request.user, request=request,
                             detail=f"was unhealthy: {reason}")
                self.message_user(request, f"GPU {node}:{index} is back in service.")
            else:
                self.message_user(request, f"GPU {node}:{index} was not unhealthy.", messages.WARNING)


@admin.register(GpuPolicy)
class GpuPolicyAdmin(AuditedAdmin, StaffMayManage, admin.ModelAdmin):
    """The one row of GPU health and idle-reclaim settings (changes audited)."""

    audit_action = "gpupolicy"
    list_display = ["__str__", "unhealthy_xids", "launch_failure_limit", "idle_util_threshold", "idle_after_s",
                    "idle_grace_s"]

    def has_add_permission(self, request: HttpRequest, *args) -> bool:
        return super().has_add_permission(request) and not GpuPolicy.objects.exists()

    def has_delete_permission(self, request: HttpRequest, obj=None) -> bool:  # noqa: ANN001
        return False
