"""The jobs app's models (docs/architecture.md, "Data model").

Jobs, schedules, owner policies, the lease tables and the stored Idempotency-Key
responses (pruned by runs/history/retention.py) are read by runs/ too, so they are
defined in scheduler_core/models.py (runs never imports jobs: docs/architecture.md, "Code
layout and dependency rule") and imported here, their home to Django, to jobs/ and to the
migrations. Only the models nothing in runs/ needs are defined here.
"""

from jobs.schedules.backfill_models import Backfill
from scheduler_core.models import (
    QUEUE_RE,
    IdempotencyKey,
    Job,
    JobQuerySet,
    LeaseChangeCount,
    LeaseMember,
    LeaseTenure,
    MisfirePolicy,
    OwnerPolicy,
    Schedule,
    SchedulerPartition,
    validate_queue_list,
)

__all__ = ["Backfill", "IdempotencyKey", "Job", "JobQuerySet", "LeaseChangeCount",
           "LeaseMember", "LeaseTenure", "MisfirePolicy", "OwnerPolicy", "QUEUE_RE", "Schedule",
           "SchedulerPartition", "validate_queue_list"]
