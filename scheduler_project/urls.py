"""URL configuration: the admin (with the dashboard), the REST API under /api/, health
probes and the Prometheus endpoint. The site has no page of its own: / leads to the
admin, the operators' console (whose "View site" link is hidden: it would lead back)."""

from django.contrib import admin
from django.urls import include, path
from django.views.generic import RedirectView

from jobs.api.jobs import healthz, readyz
from runs.metrics.endpoint import metrics_view

# settings.INSTALLED_APPS uses SimpleAdminConfig: the admin modules load here, not at start.
admin.autodiscover()
admin.site.site_url = None  # "View site" would lead back to the admin itself

urlpatterns = [
    path("", RedirectView.as_view(pattern_name="admin:index")),
    path("admin/dashboard/", include("runs.dashboard.urls")),
    path("admin/", admin.site.urls),
    path("api/", include("scheduler_project.api_urls")),
    path("healthz", healthz),
    path("readyz", readyz),
    path("metrics", metrics_view, name="metrics"),
]
