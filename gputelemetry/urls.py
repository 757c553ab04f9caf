"""URLs of the node page and the telemetry JSON (included at the site root)."""

from django.urls import path

from gputelemetry import views

urlpatterns = [
    path("cluster/nodes/<str:name>/", views.node_page, name="node"),
    path("cluster/nodes/<str:name>/telemetry.json", views.node_json, name="node-telemetry"),
    path("jobs/<int:job_id>/telemetry.json", views.job_json, name="job-telemetry"),
]
