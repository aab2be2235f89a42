"""Settings of the tiny Django project that hosts django-tasks-scheduler for the benchmark:
its app (and contenttypes, which its task arguments need), the task rows in PostgreSQL
database bench_dtscheduler, one queue "default" on the bench's Redis, db 8, everything else
at its defaults (SCHEDULER_INTERVAL 10 s)."""

import os

SECRET_KEY = "bench-not-secret"
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"
INSTALLED_APPS = ["django.contrib.contenttypes", "scheduler"]
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": "bench_dtscheduler",
        "USER": "postgres",
        "HOST": "127.0.0.1",
        "PORT": int(os.environ.get("BENCH_PG_PORT", "5432")),
    }
}
_port = os.environ.get("BENCH_REDIS_PORT", "6379")
SCHEDULER_QUEUES = {"default": {"URL": f"redis://127.0.0.1:{_port}/8"}}
