"""Admin: staff see every user's webhooks and deliveries; only here can a webhook be allowed a private address."""

from __future__ import annotations

from django.contrib import admin

from notifications.models import Delivery, Preference, Webhook
from scheduler.admin import StaffMayManage, StaffMayView


@admin.register(Webhook)
class WebhookAdmin(StaffMayManage, admin.ModelAdmin):
    list_display = ["id", "owner", "project", "url", "active", "allow_private", "created_at"]
    list_filter = ["active", "allow_private", "project"]
    search_fields = ["url", "owner__username", "project__name"]
    fields = ["owner", "project", "events", "url", "active", "allow_private"]


@admin.register(Delivery)
class DeliveryAdmin(StaffMayView, admin.ModelAdmin):
    list_display = ["id", "owner", "channel", "event", "job", "target", "status", "attempts", "response_code",
                    "created_at"]
    list_filter = ["channel", "status", "event"]
    search_fields = ["owner__username", "target"]


@admin.register(Preference)
class PreferenceAdmin(StaffMayView, admin.ModelAdmin):
    list_display = ["user", "email_events", "webhook_events"]
