"""URLs of the operators' dashboard (staff only), mounted at /admin/dashboard/."""

from django.urls import path

from runs.dashboard import views

app_name = "dashboard"

urlpatterns = [
    path("", views.dashboard, name="index"),
    path("data.json", views.dashboard_data, name="data"),
]
