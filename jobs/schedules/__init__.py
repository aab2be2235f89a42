"""Cron schedules (docs/cron.md): expressions evaluated in a timezone, crontab
files, the scheduler daemon that makes their runs, pause and resume, and backfill."""
