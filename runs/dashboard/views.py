"""The operators' dashboard (docs/admin.md): a page inside the admin and the JSON endpoint it
polls every few seconds, so its figures move without a page reload. For staff holding the
run view permission (``runs.view_run``, the admin's rule for the run pages it summarises:
every owner's queues, jobs and running runs; docs/security.md)."""

from django.contrib import admin
from django.contrib.admin.views.decorators import staff_member_required
from django.core.exceptions import PermissionDenied
from django.http import JsonResponse
from django.template.response import TemplateResponse
from django.views.decorators.cache import never_cache

from runs.dashboard.figures import snapshot
from scheduler_core.replicas import read_alias

REFRESH_S = 3.0
PERMISSION = "runs.view_run"


@staff_member_required
@never_cache
def dashboard(request):
    """The dashboard page, rendered with a first snapshot so it shows figures at once; a
    non-staff visitor is sent to the admin login, staff without PERMISSION get a 403."""
    if not request.user.has_perm(PERMISSION):
        raise PermissionDenied(f"the dashboard needs the {PERMISSION} permission")
    context = {
        **admin.site.each_context(request),
        "title": "Dashboard",
        "snapshot": snapshot(history=read_alias()),
        "refresh_ms": int(REFRESH_S * 1000),
    }
    return TemplateResponse(request, "admin/runs/dashboard.html", context)


@never_cache
def dashboard_data(request):
    """``GET /admin/dashboard/data.json``: the snapshot (runs/dashboard/figures.py) as
    JSON. Answers 403 with a JSON reason rather than a login page, since it is fetched by
    script."""
    user = request.user
    if not (user.is_active and user.is_staff):
        return JsonResponse({"detail": "staff login required"}, status=403)
    if not user.has_perm(PERMISSION):
        return JsonResponse({"detail": f"the {PERMISSION} permission is required"},
                            status=403)
    return JsonResponse(snapshot(history=read_alias()))
