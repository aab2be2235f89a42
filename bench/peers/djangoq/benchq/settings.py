"""Settings of the tiny Django project that hosts django-q2 for the benchmark.

ORM tables (Task/Success/Schedule) in PostgreSQL database bench_djangoq; broker: django-q2's
default Redis broker on Redis db 4. Q_CLUSTER per django-q2's docs: 2 workers; timeout below
retry so that a broker with receipts would redeliver an unacknowledged task (the Redis broker
has none: BLPOP removes the task); failed tasks are not acknowledged (ack_failures False,
max_attempts 3); every success kept (save_limit 0) so W2's history is complete.
"""

import os

SECRET_KEY = "bench-not-secret"
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"
INSTALLED_APPS = ["django_q"]
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": "bench_djangoq",
        "USER": "postgres",
        "HOST": "127.0.0.1",
        "PORT": int(os.environ.get("BENCH_PG_PORT", "5432")),
    }
}
Q_CLUSTER = {
    "name": "bench",
    "workers": 2,
    "timeout": 60,
    "retry": 90,
    "ack_failures": False,
    "max_attempts": 3,
    "save_limit": 0,
    # The tuned row (bench.py, VARIANTS): tasks fetched per broker call; 1 is the default.
    "bulk": int(os.environ.get("BENCH_DJQ_BULK", "1")),
    "redis": {"host": "127.0.0.1", "port": int(os.environ.get("BENCH_REDIS_PORT", "6379")),
              "db": 4},
}
