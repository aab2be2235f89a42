"""The jobs side of the admin console (docs/admin.md): the job pages (job_admin, with
their forms and list filters) and the owner policy and scheduler partition pages
(policies). Importing this package registers them all."""

from jobs.admin import job_admin, policies
from jobs.admin.job_admin import describe_cron

__all__ = ["describe_cron", "job_admin", "policies"]
