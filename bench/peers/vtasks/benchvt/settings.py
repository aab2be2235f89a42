"""Settings of the tiny Django project that hosts django-vtasks for the benchmark: its
database backend (the README's quick start) as TASKS' default, the queue table in
PostgreSQL database bench_vtasks, everything else at django-vtasks' defaults
(VTASKS_CONCURRENCY 20 per worker, queue "default")."""

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
        "PORT": 5432,
    }
}
TASKS = {"default": {"BACKEND": "django_vtasks.backends.db.DatabaseTaskBackend"}}
