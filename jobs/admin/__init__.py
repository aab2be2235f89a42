"""The jobs side of the admin console (docs/admin.md): the job pages (job_admin, with
their forms and list filters), the owner policy and scheduler partition pages
(owner_policies), the backfills' page and the job list's backfill action (backfill), and the
API tokens' page (tokens: knox's, for superusers only when the token is another user's).
Importing this package registers them all."""

from jobs.admin import backfill, job_admin, owner_policies, tokens
from jobs.admin.job_admin import describe_cron

__all__ = ["backfill", "describe_cron", "job_admin", "owner_policies", "tokens"]
