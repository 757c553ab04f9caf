from django.urls import path

from notifications import views

urlpatterns = [
    path("account/notifications/", views.settings_page, name="notifications"),
    path("account/notifications/webhooks/<int:webhook_id>/delete/", views.webhook_delete, name="webhook-delete"),
    path("jobs/<int:job_id>/notifications/", views.job_choices, name="job-notifications"),
]
