"""Django settings, twelve-factor: everything that differs between deploys comes from the
environment (docs/architecture.md, "Configuration").

DATABASE_URL  default sqlite:///db.sqlite3 (the embedded default)
DATABASE_POOLER  "pgbouncer" when DATABASE_URL goes through PgBouncer in transaction
              pooling mode (docs/scaling.md, "PgBouncer"); default empty: a direct connection
DATABASE_REPLICA_URL  PostgreSQL streaming replicas, comma-separated, for the history lists,
              logs and dashboard; DATABASE_REPLICA_MAX_LAG_S their staleness bound, default
              5 s (docs/scaling.md, "Read replicas")
DATABASE_LISTEN_URL  PostgreSQL: where idle workers of the database broker LISTEN, when
              DATABASE_URL goes through PgBouncer in transaction mode (default: DATABASE_URL)
REDIS_URL     unset: the database broker serves the queue; redis+cluster://host:port/ a
              Redis Cluster, host:port,host:port,... for several seed nodes
              (docs/scaling.md, "A Redis Cluster")
SCHEDULER_BROKER  "redis" or "database"; overrides the choice REDIS_URL implies
SECRET_KEY, DEBUG, ALLOWED_HOSTS, and the HTTPS knobs (cookies, HSTS, SSL redirect,
CSRF_TRUSTED_ORIGINS, SECURE_PROXY_SSL_HEADER): docs/security.md gives each one's default
SCHEDULER_*   tunables, see scheduler_core/conf.py for each one, its unit and default
"""

import os
from datetime import timedelta
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

from scheduler_core import drf_settings
from scheduler_core.conf import flag
from scheduler_core.db_urls import parse_database_url
from scheduler_core.replicas import replica_databases
from scheduler_core.rest.client_address import DEFAULT_PROXY_NETWORKS
from scheduler_core.startup import DEV_SECRET_KEY, proxy_ssl_header
from scheduler_project.logging_config import django_logging

BASE_DIR = Path(__file__).resolve().parent.parent


def env_bool(name: str, default: bool) -> bool:
    """A true/false environment variable (scheduler_core.conf.flag's spellings); ``default``
    when unset. Raises ImproperlyConfigured naming the variable for any other value, so that a
    typo in a security setting is not silently read as false."""
    value = os.environ.get(name)
    if value is None:
        return default
    try:
        return flag(value)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name}={value!r}: {exc}") from None


def env_list(name: str, default: str = "") -> list[str]:
    """A comma-separated environment variable as a list (blanks dropped)."""
    return [item.strip() for item in os.environ.get(name, default).split(",") if item.strip()]


# Safe by default (docs/security.md): DEBUG shows tracebacks, settings and the environment
# on error pages, so only an explicit DEBUG=true turns it on (scripts/demo and the test
# settings do).
DEBUG = env_bool("DEBUG", False)
# Only so that manage.py works in a fresh clone: with DEBUG off the web server and the
# daemons refuse to start on it (scheduler_core/startup.py).
SECRET_KEY = os.environ.get("SECRET_KEY") or DEV_SECRET_KEY
# Earlier keys, comma-separated, still accepted after SECRET_KEY changed: Django's rotation
# (sessions, signatures), and the http handler's encrypted headers (docs/http-handler.md).
SECRET_KEY_FALLBACKS = env_list("SECRET_KEY_FALLBACKS")
# With DEBUG on, the loopback names; otherwise only the hosts given, so a forged Host
# header is refused (400) instead of being reflected into absolute links.
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ".localhost,127.0.0.1,[::1]" if DEBUG else "")

# HTTPS behind a Heroku-style router (docs/security.md). Secure cookies are on outside
# DEBUG: browsers still send them to http://localhost and 127.0.0.1, so a plain-HTTP test
# on the machine itself works. The redirect and HSTS stay opt-in: on plain HTTP the first
# loops and the second pins the host to HTTPS in the browser.
SESSION_COOKIE_SECURE = env_bool("SESSION_COOKIE_SECURE", not DEBUG)
CSRF_COOKIE_SECURE = env_bool("CSRF_COOKIE_SECURE", not DEBUG)
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", False)
# Probes (kubelet, load balancers) call these over plain HTTP inside the platform.
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$"]
SECURE_HSTS_SECONDS = int(os.environ.get("SECURE_HSTS_SECONDS", "0"))
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", False)
SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", False)
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS")
# The header a TLS-terminating proxy sets to "https" (X-Forwarded-Proto on Heroku). Unset
# by default: trusting it without such a proxy would let any client claim HTTPS.
SECURE_PROXY_SSL_HEADER = proxy_ssl_header(os.environ.get("SECURE_PROXY_SSL_HEADER", ""))

INSTALLED_APPS = [
    # SimpleAdminConfig: admin modules load with the URL configuration (urls.py calls
    # autodiscover), so the daemons, which serve no URL, start 0.3 s sooner.
    "django.contrib.admin.apps.SimpleAdminConfig",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "knox",
    "axes",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",  # the Swagger UI's assets (scheduler_core/drf_settings.py)
    "jobs",
    "runs",
    "scheduler_tasks",
    "workflows",
    # Your own apps (EXTRA_APPS=etl,billing): their handlers.py and tasks modules are
    # loaded by every process, as this project's are (docs/python-api.md, "Handlers").
    *env_list("EXTRA_APPS"),
]

MIDDLEWARE = [
    # First, so that whatever an inner layer answers under /api/ (a 404 of Django's, a 400
    # of a forged Host, a 413, a 500) reaches the client as JSON (docs/api.md).
    "jobs.api.json_errors.JsonApiErrorsMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    # A NUL in an admin query string would reach PostgreSQL and fail the page with a 500.
    "scheduler_project.nul_guard.AdminNulGuardMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Last, as django-axes' docs require: it turns a locked-out login into the lockout answer.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "scheduler_project.urls"
WSGI_APPLICATION = "scheduler_project.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]


# DATABASE_POOLER's values: "" connects to PostgreSQL itself, "pgbouncer" through PgBouncer
# in transaction pooling mode.
DATABASE_POOLERS = ("", "pgbouncer")
# Executions of a statement on a session before psycopg prepares it (its default).
PREPARE_THRESHOLD = 5


def database_config(url: str, pooler: str | None = None) -> dict:
    """Parse a database URL with dj-database-url and add the per-engine options the
    scheduler relies on.

    SQLite: WAL and IMMEDIATE transactions, so that the scheduler, dispatcher and workers
    (separate processes) serialise their writes instead of failing with "database is
    locked". PostgreSQL: persistent connections for the daemons' tight loops, and
    ``idle_in_transaction_session_timeout`` (DB_IDLE_IN_TRANSACTION_TIMEOUT_MS, default
    60 s) so a stalled process cannot hold row locks indefinitely.

    ``pooler`` (str, one of DATABASE_POOLERS; None: the DATABASE_POOLER environment
    variable) "pgbouncer": PostgreSQL is reached through PgBouncer in transaction pooling
    mode, where each transaction may run on another server session. No server-side
    cursors and no prepared statements (neither outlives its session; a direct connection
    prepares the statements of server-binding cursors: PREPARE_THRESHOLD), and no ``options``
    startup parameter (PgBouncer refuses the connection): the idle-in-transaction limit is
    PgBouncer's ``idle_transaction_timeout`` instead. Raises ImproperlyConfigured naming
    DATABASE_POOLER for any other value. Ignored for SQLite.
    """
    if pooler is None:
        pooler = os.environ.get("DATABASE_POOLER", "").strip().lower()
    if pooler not in DATABASE_POOLERS:
        raise ImproperlyConfigured(
            f"DATABASE_POOLER={pooler!r}: expected 'pgbouncer' (transaction pooling) or "
            "nothing (a direct connection)")
    # libpq's host lists too (host1:5432,host2:5432): docs/scaling.md, "Failover".
    config = parse_database_url(url, conn_max_age=60, conn_health_checks=True)
    if config["ENGINE"] == "django.db.backends.sqlite3":
        config["CONN_MAX_AGE"] = 0
        config["OPTIONS"] = {
            "transaction_mode": "IMMEDIATE",
            "timeout": 30,
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        }
        config["TEST"] = {"NAME": config["NAME"] + ".test"}
    elif config["ENGINE"] == "django.db.backends.postgresql" and pooler == "pgbouncer":
        # A cursor declared in one transaction is gone when the next one runs on another
        # server session; so is a prepared statement (Django's default is off already:
        # said here so that it stays off).
        config["DISABLE_SERVER_SIDE_CURSORS"] = True
        config.setdefault("OPTIONS", {})["prepare_threshold"] = None
    elif config["ENGINE"] == "django.db.backends.postgresql":
        # A process stopped inside a transaction (SIGSTOP, a debugger, a hung handler of
        # the admin) must not hold row locks for ever: PostgreSQL ends such a session.
        idle_ms = int(os.environ.get("DB_IDLE_IN_TRANSACTION_TIMEOUT_MS", "60000"))
        config.setdefault("OPTIONS", {})["options"] = (
            f"-c idle_in_transaction_session_timeout={idle_ms}")
        # psycopg's own default, which Django turns off: a statement sent through a
        # server-binding cursor five times on a session is prepared there. Only the
        # one-off create asks for one (jobs/ingest/one_off.py): planning its statement
        # anew cost each enqueue about a third of its time (docs/performance.md).
        config["OPTIONS"]["prepare_threshold"] = PREPARE_THRESHOLD
    return config


DATABASES = {
    "default": database_config(
        os.environ.get("DATABASE_URL", f"sqlite:///{BASE_DIR / 'db.sqlite3'}")
    ),
    # replica_1, replica_2, ...: read only where a view asks (scheduler_core/replicas.py).
    **replica_databases(os.environ.get("DATABASE_REPLICA_URL", ""), database_config),
}
DATABASE_ROUTERS = ["scheduler_core.replicas.ReplicaRouter"]
DATABASE_REPLICA_MAX_LAG_S = float(os.environ.get("DATABASE_REPLICA_MAX_LAG_S", "5"))

# The same database reached directly, for the listen connection of the database broker's
# idle workers (runs/brokers/pg_listen.py): a LISTEN through PgBouncer in transaction mode
# holds no server session and hears nothing. Unset: DATABASES["default"]'s settings.
DATABASE_LISTEN_URL = os.environ.get("DATABASE_LISTEN_URL", "")

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# Logins (docs/security.md, "Authentication, throttling and tokens"). django-axes counts
# failed logins of both login pages (/admin/login/, /api/auth/login/: both go through
# authenticate() with the request) and refuses a username from an address after
# LOGIN_FAILURE_LIMIT failures, for LOGIN_COOLOFF_S seconds, even with the right password.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",  # first, as its docs require
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = int(os.environ.get("LOGIN_FAILURE_LIMIT", "5"))
AXES_COOLOFF_TIME = timedelta(seconds=float(os.environ.get("LOGIN_COOLOFF_S", "900")))
# The username at one address: one address (an office behind NAT) trying many accounts
# does not lock out its colleagues, and nobody elsewhere can lock a user out.
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_CALLABLE = "scheduler_project.lockout.lockout_response"
# The username cut to axes' column (255): a longer one was a 500, not a failed login.
AXES_USERNAME_CALLABLE = "scheduler_project.lockout.username"
# Where /api/auth/login/ goes without ?next=: Django's default, /accounts/profile/, is
# no page here. (The admin's login goes to the admin.)
LOGIN_REDIRECT_URL = "/api/"
# The client address as DRF's throttles see it (REMOTE_ADDR, or X-Forwarded-For behind
# TRUSTED_PROXY_COUNT proxies), so lockouts and throttles count the same client.
AXES_CLIENT_IP_CALLABLE = "scheduler_project.lockout.client_ip"
TRUSTED_PROXY_COUNT = int(os.environ.get("TRUSTED_PROXY_COUNT", "0"))
# X-Forwarded-For is read only from peers in these networks (scheduler_core/rest/client_address.py):
# a client reaching the web server directly could otherwise name itself anew each try.
TRUSTED_PROXY_NETWORKS = [
    net.strip() for net in os.environ.get("TRUSTED_PROXY_NETWORKS", ",".join(
        DEFAULT_PROXY_NETWORKS)).split(",") if net.strip()]

# API tokens: django-rest-knox keeps a SHA-512 digest, never the token
# (scheduler_core/rest/tokens.py); "Token <key>" as DRF's header had it. Tokens made by
# createapitoken and loaddemo last until deleted unless asked otherwise.
REST_KNOX = {"AUTH_HEADER_PREFIX": "Token", "TOKEN_TTL": None}

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

# Django's task framework runs on this scheduler: a task's enqueue() is a one-off job of
# the handler django_task (docs/django-tasks.md).
TASKS = {
    "default": {
        "BACKEND": "scheduler_tasks.backend.SchedulerBackend",
        "QUEUES": [],  # any queue name the scheduler accepts
    }
}

REDIS_URL = os.environ.get("REDIS_URL", "")
if REDIS_URL and not REDIS_URL.startswith("redis+cluster://") and "," in (
        REDIS_URL.partition("://")[2].partition("/")[0]):
    # Seeds of a cluster without its scheme: django-redis would take the first host for a
    # primary and the others for its replicas, and the broker cannot parse them.
    raise ImproperlyConfigured("REDIS_URL lists several hosts: a Redis Cluster's URL is "
                               "redis+cluster://host:port,host:port/ (docs/scaling.md)")
# django-redis has no Redis Cluster client: with a redis+cluster:// URL the throttle counts
# stay per process (Django's memory cache), as without Redis (docs/isolation.md).
if REDIS_URL and not REDIS_URL.startswith("redis+cluster://"):
    CACHES = {
        "default": {
            "BACKEND": "django_redis.cache.RedisCache",
            "LOCATION": REDIS_URL,
            "OPTIONS": {"CLIENT_CLASS": "django_redis.client.DefaultClient"},
            # Per deployment: two deployments sharing one Redis keep separate throttles.
            "KEY_PREFIX": os.environ.get("CACHE_KEY_PREFIX", "jobscheduler"),
        }
    }

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
# WhiteNoise serves the admin's static files under gunicorn too; with finders on it needs
# no collectstatic step (run `manage.py collectstatic` for compressed, cached files).
WHITENOISE_USE_FINDERS = True
# Autorefresh looks files up per request, so a checkout with no collectstatic output (a
# fresh clone, CI) does not warn about a missing STATIC_ROOT.
WHITENOISE_AUTOREFRESH = DEBUG

# Form bodies (the admin, the API's login page): Django's own cap, 2.5 MiB, 413 in JSON
# under /api/. JSON bodies under /api/ are read by scheduler_core/rest/parsers.py within the API's
# caps instead (SCHEDULER_API_MAX_BODY_BYTES, SCHEDULER_API_BULK_MAX_BODY_BYTES; docs/api.md), so
# that a 10,000-job bulk body fits.
DATA_UPLOAD_MAX_MEMORY_SIZE = 2_621_440

# The REST API (docs/api.md). Its caps and the per-owner throttle rate are SCHEDULER_*
# tunables (scheduler_core/conf.py: MAX_PAYLOAD_BYTES, MAX_TIMEOUT_S, MAX_RETRIES,
# API_THROTTLE_RATE, API_MAX_BODY_BYTES, API_BULK_MAX_BODY_BYTES, API_BULK_MAX_JOBS,
# IDEMPOTENCY_TTL_S), read per request so that they can be changed from the environment or
# override_settings.
# The API's views name their own authentication, permission, throttles and parser
# (scheduler_core/rest/view_defaults.py); from here DRF takes drf-spectacular's schema class
# (scheduler_core/drf_settings.py, where a project of your own takes it from too) and how
# many proxies to trust for the client address of the anonymous throttle.
REST_FRAMEWORK = {**drf_settings.REST_FRAMEWORK, "NUM_PROXIES": TRUSTED_PROXY_COUNT}
SPECTACULAR_SETTINGS = drf_settings.SPECTACULAR_SETTINGS

LOGGING = django_logging(os.environ.get("SCHEDULER_LOG_LEVEL", "INFO"))

# Owner alerts by email (docs/alerts.md): Django's mailer, SMTP unless EMAIL_BACKEND says
# otherwise (e.g. django.core.mail.backends.console.EmailBackend on a laptop).
EMAIL_BACKEND_PATH = os.environ.get("EMAIL_BACKEND", "django.core.mail.backends.smtp.EmailBackend")
MAILERS = {"default": {"BACKEND": EMAIL_BACKEND_PATH, "OPTIONS": {
    "host": os.environ.get("EMAIL_HOST", "localhost"),
    "port": int(os.environ.get("EMAIL_PORT", "25")),
    "username": os.environ.get("EMAIL_HOST_USER", ""),
    "password": os.environ.get("EMAIL_HOST_PASSWORD", ""),
    "use_tls": flag(os.environ.get("EMAIL_USE_TLS", "false")),
    "timeout": 10,
} if EMAIL_BACKEND_PATH.endswith("smtp.EmailBackend") else {
    # Django's file backend: one file per email in this folder (tests, staging).
    "file_path": os.environ.get("EMAIL_FILE_PATH", "")
} if EMAIL_BACKEND_PATH.endswith("filebased.EmailBackend") else {}}}
DEFAULT_FROM_EMAIL = os.environ.get("DEFAULT_FROM_EMAIL", "scheduler@localhost")
