from django.urls import include, path
from rest_framework.routers import SimpleRouter

from portal.api import sessions, views

router = SimpleRouter()
router.register("jobs", views.JobViewSet, basename="api-job")

urlpatterns = [
    path("quota/", views.QuotaView.as_view(), name="api-quota"),
    path("nodes/", views.NodeListView.as_view(), name="api-nodes"),
    path("images/", views.ImageListView.as_view(), name="api-images"),
    path("sessions/", sessions.SessionCreateView.as_view(), name="api-session-create"),
    path("sessions/<int:job_id>/", sessions.SessionDetailView.as_view(), name="api-session"),
    path("", include("notifications.api_urls")),
    path("fairshare/", views.FairShareView.as_view(), name="api-fairshare"),
    path("usage/", views.UsageView.as_view(), name="api-usage"),
    path("usage/csv/", views.UsageCsvView.as_view(), name="api-usage-csv"),
    *router.urls,
]
