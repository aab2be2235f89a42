"""The operators' dashboard (docs/admin.md): a page inside the admin and the JSON endpoint it
polls every few seconds, so its figures move without a page reload. Staff only."""

from django.contrib import admin
from django.contrib.admin.views.decorators import staff_member_required
from django.http import JsonResponse
from django.template.response import TemplateResponse
from django.views.decorators.cache import never_cache

from runs.dashboard.figures import snapshot

REFRESH_S = 3.0


@staff_member_required
@never_cache
def dashboard(request):
    """The dashboard page, rendered with a first snapshot so it shows figures at once; a
    non-staff visitor is sent to the admin login."""
    context = {
        **admin.site.each_context(request),
        "title": "Dashboard",
        "snapshot": snapshot(),
        "refresh_ms": int(REFRESH_S * 1000),
    }
    return TemplateResponse(request, "dashboard/index.html", context)


@never_cache
def dashboard_data(request):
    """``GET /admin/dashboard/data.json``: the snapshot (runs/dashboard/figures.py) as
    JSON. Answers 403 with a JSON reason rather than a login page, since it is fetched by
    script."""
    user = request.user
    if not (user.is_active and user.is_staff):
        return JsonResponse({"detail": "staff login required"}, status=403)
    return JsonResponse(snapshot())
