"""Who may see and act on whose rows through the REST API (docs/api.md, "Owners";
docs/security.md, "Authentication, throttling and tokens").

Everyone sees and acts on their own jobs and runs. Another owner's rows need Django's
model permissions, the rules the admin applies: ``view`` (or ``change``, which the admin
takes to include view) to see them, ``change`` to act on them (PATCH, cancel, pause,
resume, trigger, retry). ``is_staff`` grants nothing here; a superuser has every
permission. Rows the user may not view are filtered out of the queryset (each view's
``get_queryset``: jobs/api/jobs.py, runs/api/views.py, workflows/api/views.py), so they answer
404 like a missing id; rows they may view but not change answer 403 naming the
permission.
"""

from django.db.models import Model
from rest_framework.permissions import SAFE_METHODS, BasePermission


def perm(model: type[Model], action: str) -> str:
    """The permission name Django gives ``action`` ("view", "change", ...) on
    ``model``, e.g. ``"jobs.change_job"``."""
    return f"{model._meta.app_label}.{action}_{model._meta.model_name}"


def may_view_all(user, model: type[Model]) -> bool:
    """True if ``user`` may see every owner's ``model`` rows (the admin's
    has_view_permission: the view or the change permission)."""
    return user.has_perm(perm(model, "view")) or user.has_perm(perm(model, "change"))


def may_change_all(user, model: type[Model]) -> bool:
    """True if ``user`` may act on every owner's ``model`` rows (the change permission)."""
    return user.has_perm(perm(model, "change"))


def owner_id(obj) -> int | None:
    """The id of the user owning ``obj``: a job's owner, or a run's job's owner."""
    return obj.owner_id if hasattr(obj, "owner_id") else obj.job.owner_id


class OwnerOrModelPermission(BasePermission):
    """DRF object permission: reading passes (the queryset already hides what the user
    may not view); any other method on another owner's row needs the change permission
    of the row's model, and is refused with 403 naming it. A subclass for other models
    sets ``owner`` (obj -> the owning user's id)."""

    owner = staticmethod(owner_id)

    def has_object_permission(self, request, view, obj) -> bool:
        model = type(obj)
        if (request.method in SAFE_METHODS or self.owner(obj) == request.user.pk
                or may_change_all(request.user, model)):
            return True
        self.message = (f"{model._meta.verbose_name} {obj.pk} is another owner's; acting on "
                        f"it needs the {perm(model, 'change')} permission")
        return False
