"""The runs side of the admin console (docs/admin.md): runs and the dead letter
(run_admin), attempts, log lines and workers (attempts), the rate limits page
(rate_limits), and what they share (helpers, cells, paginator). Importing this package
registers them all."""

from runs.admin import attempts, rate_limits, run_admin

__all__ = ["attempts", "rate_limits", "run_admin"]
