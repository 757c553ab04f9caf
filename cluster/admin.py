"""Admin: nodes and their GPUs, for staff to inspect and drain."""

from __future__ import annotations

from django.contrib import admin, messages
from django.db.models import Count, Q
from django.http import HttpRequest

from cluster import drain
from cluster.models import Gpu, Node
from scheduler.admin import StaffMayManage, StaffMayView


class GpuInline(StaffMayView, admin.TabularInline):
    model = Gpu
    extra = 0
    fields = ["index", "model_name", "memory_mb", "allocated_to"]
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
