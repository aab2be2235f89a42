"""The admin's rate limits page (docs/admin.md; docs/isolation.md, "Rate limits"): add,
change and remove the limits by handler or key, with Django's runs.add/change/
delete_ratelimit permissions. Saves go through runs/flow/rate_limits.py, as the REST API's do,
so the broker hears of a change at once."""

from django import forms
from django.contrib import admin

from runs.flow import rate_limits as flow_limits
from runs.flow.models import RateLimit
from scheduler_core.exceptions import InvalidJob


class RateLimitForm(forms.ModelForm):
    """A rate limit, checked by flow_limits.problems (each error on its field)."""

    burst = forms.FloatField(required=False, help_text="Bucket size in runs, at least 1; "
                                                       "empty: one second's worth.")

    class Meta:
        model = RateLimit
        fields = ["scope", "name", "rate", "burst"]

    def clean(self):
        data = super().clean()
        # On a change page scope and name are read-only: the instance's.
        scope = data.get("scope", self.instance.scope)
        name = data.get("name", self.instance.name)
        for field, reason in flow_limits.problems(scope, name, data.get("rate"),
                                                  data.get("burst")).items():
            if field not in self.errors:
                self.add_error(field if field in self.fields else None, reason)
        return data


@admin.register(RateLimit)
class RateLimitAdmin(admin.ModelAdmin):
    """Rate limits: a list by scope and name, a form of four fields."""

    form = RateLimitForm
    list_display = ("scope", "name", "rate", "burst", "updated_at")
    list_filter = ("scope",)
    search_fields = ("name",)
    ordering = ("scope", "name")

    def get_readonly_fields(self, request, obj=None):
        # A limit is its scope and name: renaming one would remove a limit and add another,
        # which the change permission alone must not do (add and delete it instead).
        return ("scope", "name") if obj is not None else ()

    def save_model(self, request, obj, form, change):
        try:
            saved = flow_limits.set_rate_limit(obj.scope, obj.name, obj.rate, obj.burst)
        except InvalidJob as exc:  # checked by the form already; raced by another change
            raise ValueError(str(exc)) from exc
        obj.pk, obj.burst, obj.updated_at = saved.pk, saved.burst, saved.updated_at

    def delete_model(self, request, obj):
        flow_limits.delete_rate_limit(obj.scope, obj.name)

    def delete_queryset(self, request, queryset):
        for limit in queryset:
            flow_limits.delete_rate_limit(limit.scope, limit.name)
