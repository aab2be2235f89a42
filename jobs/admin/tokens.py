"""The admin's API token pages (Knox, "Auth tokens"): knox's own AuthTokenAdmin, with one
rule added (docs/security.md, "API tokens"): only a superuser makes a token for another
user; anyone else holding ``knox.add_authtoken`` makes tokens for themselves only. A token
carries its holder's every right, so making one for someone else is acting as them: with
knox's stock page, that permission alone made a superuser's token."""

import knox.admin  # registers knox's page first, so that it can be replaced below
from django import forms
from django.contrib import admin
from knox.models import AuthToken


def _self_only_form(base: type[forms.ModelForm], request) -> type[forms.ModelForm]:
    """``base`` (knox's add form) refusing, for a user who is not a superuser, any holder
    but ``request.user``."""

    class SelfOnlyForm(base):
        def clean_user(self):
            user = self.cleaned_data["user"]
            if user is not None and user.pk != request.user.pk:
                raise forms.ValidationError(
                    "only a superuser makes a token for another user; you may make "
                    "tokens for yourself (your own user id is "
                    f"{request.user.pk}): docs/security.md, \"API tokens\"")
            return user

    return SelfOnlyForm


class AuthTokenAdmin(knox.admin.AuthTokenAdmin):
    """knox's token admin; the add form keeps non-superusers to tokens of their own and
    starts on the user's own id."""

    def get_form(self, request, obj=None, **kwargs):
        form = super().get_form(request, obj, **kwargs)
        if obj is None and not request.user.is_superuser:
            form = _self_only_form(form, request)
        return form

    def get_changeform_initial_data(self, request):
        return {"user": request.user.pk, **super().get_changeform_initial_data(request)}


admin.site.unregister(AuthToken)
admin.site.register(AuthToken, AuthTokenAdmin)
