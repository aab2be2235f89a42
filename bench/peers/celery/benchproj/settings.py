"""Django settings for the Celery peer: PostgreSQL database bench_celery (django-celery-beat's
schedule tables for W4), Redis broker db 1.

Celery at its defaults (https://docs.celeryq.dev/en/stable/userguide/configuration.html):
early acknowledgement, prefetch multiplier 4, no result backend. The Redis visibility
timeout is raised above any ETA W3 uses (the Redis broker's docs: ETA tasks are redelivered
after it). The tuned row's options are given on the worker's command line (bench.py).
"""

import os

SECRET_KEY = "bench-only-not-secret"
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"
INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "django.contrib.auth",
    "django_celery_beat",
    ]
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": "bench_celery",
        "USER": "postgres",
        "HOST": "127.0.0.1",
        "PORT": int(os.environ.get("BENCH_PG_PORT", "5432")),
    }
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

CELERY_BROKER_URL = f"redis://127.0.0.1:{os.environ.get('BENCH_REDIS_PORT', '6379')}/1"
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 3600}  # seconds, > any ETA we use
CELERY_TIMEZONE = "UTC"
CELERY_ENABLE_UTC = True
CELERY_BEAT_SCHEDULER = "django_celery_beat.schedulers:DatabaseScheduler"
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
