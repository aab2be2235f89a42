"""URL configuration: the admin, the REST API under /api/, and health probes."""

from django.contrib import admin
from django.urls import include, path

from jobs.api import healthz, readyz

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/", include("jobs.urls")),
    path("healthz", healthz),
    path("readyz", readyz),
]
