"""URLs of the dashboard pages and downloads (included at the site root)."""

from django.urls import path

from portal.dashboard import views

urlpatterns = [
    path("cluster/", views.cluster_page, name="cluster"),
    path("latency/", views.latency_page, name="latency"),
    path("simulations/", views.simulation_page, name="simulations"),
    path("simulations/<int:run_id>/", views.simulation_detail, name="simulation-detail"),
    path("simulations/<int:run_id>/status/", views.simulation_status, name="simulation-status"),
    path("simulations/<int:run_id>/results.json", views.simulation_json, name="simulation-json"),
    path("simulations/<int:run_id>/report.html", views.simulation_report, name="simulation-report"),
    path("metrics", views.metrics_view, name="metrics"),
]
