"""Storing new jobs (docs/api.md, "Create"): the bulk create's transaction and
COPY, one one-off job in one statement, and unique jobs."""
