"""The admin's API token pages (Knox, "Auth tokens"): knox's own AuthTokenAdmin with two
rules added (docs/security.md, "API tokens"). A token carries its holder's every right, so
handling someone else's is acting as them:

- only a superuser sees, makes or deletes another user's tokens; anyone else holding the
  ``knox.*`` permissions handles their own only (with knox's stock pages,
  ``knox.add_authtoken`` alone made a superuser's token);
- a saved token cannot be edited at all: its holder (``user``), its ``digest`` and
  ``token_key`` decide whose token it is and which token it is (with them editable,
  ``knox.change_authtoken`` handed one's own token to a superuser, or planted a token of
  one's choosing on anyone), and a longer ``expiry`` is a new token's business."""

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
    """knox's token admin: the add form keeps non-superusers to tokens of their own and
    starts on the user's own id; every other page (list, change, delete, the bulk delete
    action, history) reaches the user's own tokens only, unless a superuser asks; a saved
    token is shown, never edited."""

    readonly_fields = ("digest", "token_key", "user", "created", "expiry")

    def get_queryset(self, request):
        tokens = super().get_queryset(request)
        if request.user.is_superuser:
            return tokens
        return tokens.filter(user=request.user)

    def get_form(self, request, obj=None, **kwargs):
        form = super().get_form(request, obj, **kwargs)
        if obj is None and not request.user.is_superuser:
            form = _self_only_form(form, request)
        return form

    def get_fields(self, request, obj=None):
        if obj is None:  # knox's add form: the holder and the expiry, nothing else
            return list(self.add_form.Meta.fields)
        return list(self.readonly_fields)

    def get_readonly_fields(self, request, obj=None):
        return () if obj is None else self.readonly_fields

    def has_change_permission(self, request, obj=None):
        # Nothing on a saved token is editable; the page stays as a view for anyone who
        # may view tokens (knox.view_authtoken or, as Django reads it, change).
        return False if obj is not None else super().has_change_permission(request)

    def get_changeform_initial_data(self, request):
        return {"user": request.user.pk, **super().get_changeform_initial_data(request)}


admin.site.unregister(AuthToken)
admin.site.register(AuthToken, AuthTokenAdmin)
