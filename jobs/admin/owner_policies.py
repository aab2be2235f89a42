"""The admin's pages of owner policies and scheduler partitions (docs/admin.md)."""

from django.contrib import admin
from django.db.models import DurationField, ExpressionWrapper, F
from django.db.models.functions import Now

from jobs import tenants
from jobs.models import OwnerPolicy, SchedulerPartition
from runs.admin.helpers import timestamp_column
from runs.services import sync_owner_limits


@admin.register(OwnerPolicy)
class OwnerPolicyAdmin(admin.ModelAdmin):
    """Per-owner bounds, queues and default (tenant) queue (docs/isolation.md, "Tenant
    bounds"). Saving goes through jobs.tenants.set_owner_policy so the broker enforces a
    new concurrency limit at once."""

    list_display = ("owner", "max_running", "max_pending", "max_jobs", "highest_priority",
                    "max_timeout_s", "max_attempts", "max_map_items", "queues",
                    "default_queue", "updated_at")
    search_fields = ("owner__username", "queues", "default_queue")
    raw_id_fields = ("owner",)

    def save_model(self, request, obj, form, change):
        values = {field: getattr(obj, field) for field in
                  (*tenants.POLICY_FIELDS, "queues", "default_queue")}
        obj.pk = tenants.set_owner_policy(obj.owner, **values).pk

    def delete_model(self, request, obj):
        super().delete_model(request, obj)
        sync_owner_limits()

    def delete_queryset(self, request, queryset):
        super().delete_queryset(request, queryset)
        sync_owner_limits()


@admin.register(SchedulerPartition)
class SchedulerPartitionAdmin(admin.ModelAdmin):
    """Which scheduler owns which partition of job ids, read-only (schedulers take and
    renew these leases themselves)."""

    list_display = ("number", "owner", "lease_expires", "lease_state")
    lease_expires = timestamp_column("lease_expires_at", "lease expires")
    ordering = ("number",)
    search_fields = ("owner",)

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    def get_queryset(self, request):
        # Leases are judged on the database clock, like the schedulers judge them.
        return super().get_queryset(request).annotate(lease_left=ExpressionWrapper(
            F("lease_expires_at") - Now(), output_field=DurationField()))

    @admin.display(description="lease")
    def lease_state(self, partition):
        if not partition.owner or partition.lease_left is None:
            return "unowned"
        left = partition.lease_left.total_seconds()
        return f"live, {left:.0f} s left" if left > 0 else f"expired {-left:.0f} s ago"
