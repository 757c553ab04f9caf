"""URLs: browser pages, the REST API under /api/v1/, its schema and docs, the admin."""

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from portal import session_views, views
from portal.login import ThrottledLoginView

urlpatterns = [
    path("", views.home, name="home"),
    path("favicon.ico", views.favicon, name="favicon"),
    path("accounts/login/", ThrottledLoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("jobs/", views.job_list, name="job-list"),
    path("jobs/new/", views.job_new, name="job-new"),
    path("jobs/<int:job_id>/", views.job_detail, name="job-detail"),
    path("jobs/<int:array_id>_<int:index>/", views.array_task, name="array-task"),
    path("jobs/<int:job_id>/cancel/", views.job_cancel, name="job-cancel"),
    path("jobs/<int:job_id>/hold/", views.job_hold, name="job-hold"),
    path("jobs/<int:job_id>/release/", views.job_release, name="job-release"),
    path("jobs/<int:job_id>/priority/", views.job_priority_change, name="job-priority"),
    path("sessions/new/", session_views.session_new, name="session-new"),
    path("jobs/<int:job_id>/session/", session_views.session_status, name="session-status"),
    path("sessions/<int:job_id>/terminal/", session_views.session_terminal, name="session-terminal"),
    path("usage/", views.usage_page, name="usage"),
    path("usage/csv/", views.usage_csv, name="usage-csv"),
    path("account/tokens/", views.tokens, name="tokens"),
    path("account/tokens/<int:token_id>/revoke/", views.token_revoke, name="token-revoke"),
    path("", include("portal.dashboard.urls")),
    path("", include("notifications.urls")),
    path("", include("gputelemetry.urls")),
    path("api/v1/", include("portal.api.urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="api-schema"), name="api-docs"),
    path("admin/", admin.site.urls),
]

handler404 = "portal.views.not_found"
handler500 = "portal.views.server_error"
