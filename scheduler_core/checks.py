"""Configuration problems as Django system checks (docs/security.md, "System checks"):
``manage.py check`` reports those that matter anywhere, ``check --deploy`` adds those
that matter where DEBUG is off. The web server and the daemons run them as they start and
refuse to start on an error (scheduler_core/startup.py, refuse_insecure_start).

Registered by the runs app's ready() (runs/apps.py); runs/checks.py and jobs/checks.py
hold the checks of settings those apps read. Ids: ``scheduler.E001`` and up.
"""

from django.conf import settings
from django.core import checks
from django.core.exceptions import ImproperlyConfigured

from scheduler_core import conf
from scheduler_core.startup import GENERATE_KEY, INSECURE_PREFIX, TAG, WEB_TAG

# Django's own rule for a key it calls weak (security.W009).
KEY_MIN_LENGTH, KEY_MIN_UNIQUE = 50, 5
# Words of the keys tutorials and .env templates ship, compared without case, "-" or "_".
PLACEHOLDER_WORDS = ("changeme", "changethis", "replaceme", "yoursecret", "secretkey",
                     "placeholder", "insecure", "notsecret", "example")


def key_problem(key: str) -> str | None:
    """Why ``key`` (a SECRET_KEY) is unfit for a deployment, or None. Never quotes it."""
    if not key:
        return "is not set (the development key is in use)"
    if key.startswith(INSECURE_PREFIX):
        return f"is a development key (it starts with {INSECURE_PREFIX!r})"
    folded = key.lower().replace("-", "").replace("_", "")
    if word := next((w for w in PLACEHOLDER_WORDS if w in folded), None):
        return f"is a placeholder (it contains {word!r})"
    if len(key) < KEY_MIN_LENGTH:
        return f"is {len(key)} characters long; a key needs at least {KEY_MIN_LENGTH}"
    if len(set(key)) < KEY_MIN_UNIQUE:
        return f"has fewer than {KEY_MIN_UNIQUE} different characters"
    return None


@checks.register(TAG, deploy=True)
def check_secret_key(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    """scheduler.E001: a missing, development, placeholder or weak SECRET_KEY with DEBUG
    off."""
    if settings.DEBUG:
        return []
    try:
        key = settings.SECRET_KEY
    except ImproperlyConfigured:  # Django's answer for an empty SECRET_KEY
        key = ""
    problem = key_problem(key)
    if problem is None:
        return []
    return [checks.Error(
        f"SECRET_KEY {problem}, and DEBUG is off. Sessions, CSRF tokens, password resets "
        "and the http handler's secret headers are signed or encrypted with it.",
        hint="Set a random key of your own, the same in every process and across "
             f'restarts, e.g.\n    export SECRET_KEY="$({GENERATE_KEY})"\n'
             "(or DEBUG=true, on your own machine only)",
        id="scheduler.E001")]


@checks.register(WEB_TAG, deploy=True)
def check_allowed_hosts(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    """scheduler.E002: no ALLOWED_HOSTS with DEBUG off; scheduler.E003: '*' among them."""
    if settings.DEBUG:
        return []
    if not settings.ALLOWED_HOSTS:
        return [checks.Error(
            "ALLOWED_HOSTS is empty and DEBUG is off, so every request would be refused "
            "(400).",
            hint="Set the host names clients use, comma-separated, e.g.\n"
                 "    export ALLOWED_HOSTS=scheduler.example.com",
            id="scheduler.E002")]
    if "*" in settings.ALLOWED_HOSTS:
        return [checks.Error(
            "ALLOWED_HOSTS holds '*' and DEBUG is off: any Host header is accepted and "
            "reflected into absolute links (the API's pagination, password reset mails).",
            hint="Name the hosts clients use instead, e.g.\n"
                 "    export ALLOWED_HOSTS=scheduler.example.com",
            id="scheduler.E003")]
    return []


@checks.register(TAG)
def check_tunables(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    """scheduler.E004: an unknown SCHEDULER setting, or a tunable (SCHEDULER or
    SCHEDULER_<name>) whose value does not read as its type."""
    found = []
    try:
        conf.get("SHARDS")  # reads settings.SCHEDULER, refusing unknown names
    except ImproperlyConfigured as exc:
        if str(exc).startswith("Unknown SCHEDULER"):
            return [checks.Error(str(exc), hint="scheduler_core/conf.py lists the tunables",
                                 id="scheduler.E004")]
    for name in conf.DEFAULTS:
        try:
            conf.get(name)
        except ImproperlyConfigured as exc:
            found.append(checks.Error(str(exc), hint="scheduler_core/conf.py gives each "
                                      "tunable's type and default", id="scheduler.E004"))
    return found
