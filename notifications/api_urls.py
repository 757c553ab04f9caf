"""Routes of the notifications API, mounted under /api/v1/ by portal/api/urls.py."""

from django.urls import path

from notifications import api

urlpatterns = [
    path("notifications/", api.PreferenceView.as_view(), name="api-notifications"),
    path("webhooks/", api.WebhookListView.as_view(), name="api-webhooks"),
    path("webhooks/<int:webhook_id>/", api.WebhookDetailView.as_view(), name="api-webhook"),
    path("deliveries/", api.DeliveryListView.as_view(), name="api-deliveries"),
    path("jobs/<int:job_id>/notifications/", api.JobChoicesView.as_view(), name="api-job-notifications"),
]
