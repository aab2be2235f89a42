"""Settings of the tiny Django project that hosts django-vtasks for the benchmark.

BENCH_VTASKS_BACKEND=db (bench/peers/vtasks): its database backend (the README's quick
start) as TASKS' default, the queue table in PostgreSQL database bench_vtasks.
BENCH_VTASKS_BACKEND=valkey (bench/peers/vtasksvk): its Valkey backend on the bench's Redis,
db 7 (OPTIONS BROKER_URL). Everything else at django-vtasks' defaults (VTASKS_CONCURRENCY
20 per worker, queue "default"); the tuned rows pass VTASKS_CONCURRENCY in the workers'
environment, which django-vtasks reads when the setting is not in settings.py."""

import os

SECRET_KEY = "bench-not-secret"
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"
INSTALLED_APPS = ["django_vtasks", "django_vtasks.db"]
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": "bench_vtasks",
        "USER": "postgres",
        "HOST": "127.0.0.1",
        "PORT": int(os.environ.get("BENCH_PG_PORT", "5432")),
    }
}
if os.environ.get("BENCH_VTASKS_BACKEND", "db") == "valkey":
    _port = os.environ.get("BENCH_REDIS_PORT", "6379")
    TASKS = {"default": {"BACKEND": "django_vtasks.backends.valkey.ValkeyTaskBackend",
                         "OPTIONS": {"BROKER_URL": f"redis://127.0.0.1:{_port}/7"}}}
else:
    TASKS = {"default": {"BACKEND": "django_vtasks.backends.db.DatabaseTaskBackend"}}
