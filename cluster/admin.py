"""Admin: nodes and their GPUs, for staff to inspect and drain."""

from __future__ import annotations

from django.contrib import admin
from django.db.models import Count, Q

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

    def get_queryset(self, request):  # noqa: ANN001, ANN201
        return super().get_queryset(request).annotate(
            _free=Count("devices", filter=Q(devices__allocated_to__isnull=True))
        )

    @admin.display(description="free GPUs", ordering="_free")
    def free_gpus(self, node: Node) -> int:
        return node._free
