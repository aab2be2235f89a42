"""gunicorn reads this file from the working directory (the Procfile's and runall's web
process): its logs follow LOG_FORMAT like the daemons' (scheduler_project/logging_config.py)."""

from scheduler_project.logging_config import gunicorn_logging

logconfig_dict = gunicorn_logging()
