"""Settings of the tiny Django project that hosts django-tasks-db for the benchmark: its
DatabaseBackend as TASKS' default, the task results in PostgreSQL database
bench_djtasksdb, everything else at django-tasks-db's defaults."""

import os

SECRET_KEY = "bench-not-secret"
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"
INSTALLED_APPS = ["django_tasks_db"]
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": "bench_djtasksdb",
        "USER": "postgres",
        "HOST": "127.0.0.1",
        "PORT": int(os.environ.get("BENCH_PG_PORT", "5432")),
    }
}
TASKS = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend"}}
