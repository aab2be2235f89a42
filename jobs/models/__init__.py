"""The jobs app's models (docs/architecture.md, "Data model"), one file per concern: jobs
and schedules (job), the daemons' leases (leases), owner policies (owners), stored
Idempotency-Key responses (idempotency) and backfills (backfill).

They are a layer of their own (docs/architecture.md, "Code layout and dependency rule"):
a run belongs to a job, so runs/ reads these tables, while the rest of jobs/ makes runs
and sits above runs/. These files import only Django and scheduler_core.
"""

from jobs.models.backfill import Backfill
from jobs.models.idempotency import IdempotencyKey
from jobs.models.job import QUEUE_RE, Job, JobQuerySet, MisfirePolicy, Schedule, validate_queue_list
from jobs.models.leases import LeaseChangeCount, LeaseMember, LeaseTenure, SchedulerPartition
from jobs.models.owners import OwnerPolicy

__all__ = ["Backfill", "IdempotencyKey", "Job", "JobQuerySet", "LeaseChangeCount",
           "LeaseMember", "LeaseTenure", "MisfirePolicy", "OwnerPolicy", "QUEUE_RE", "Schedule",
           "SchedulerPartition", "validate_queue_list"]
