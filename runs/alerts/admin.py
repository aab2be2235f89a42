"""The admin of owner alerts (docs/alerts.md): policies per owner and per job, editable;
alerts raised, read-only (they are delivered by the dispatcher, never by hand). The
webhook secret is not shown here (it signs the owner's webhooks; the owner reads it from
GET /api/alerts/); an action makes a new one."""

from django.contrib import admin

from runs.alerts.models import AlertEvent, AlertPolicy, new_secret


@admin.register(AlertPolicy)
class AlertPolicyAdmin(admin.ModelAdmin):
    list_display = ("__str__", "email", "webhook", "on_dead", "on_misfire", "late_after_s",
                    "webhook_url")
    raw_id_fields = ("owner", "job")
    exclude = ("webhook_secret",)
    search_fields = ("owner__username", "job__name")
    actions = ["rotate_secret"]

    @admin.action(description="Make a new webhook secret (receivers must be told)")
    def rotate_secret(self, request, queryset):
        for row in queryset.filter(owner__isnull=False):
            row.webhook_secret = new_secret()
            row.save(update_fields=["webhook_secret"])
        self.message_user(request, "New webhook secrets made; the owners read them from "
                                   "GET /api/alerts/.")


@admin.register(AlertEvent)
class AlertEventAdmin(admin.ModelAdmin):
    list_display = ("id", "kind", "owner", "job_id", "run_id", "created_at",
                    "email_pending", "webhook_pending")
    list_filter = ("kind", "email_pending", "webhook_pending")
    search_fields = ("owner__username", "detail")

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False
