"""The handler registry: handlers are registered by name with ``@handler("name")`` in an
app's ``handlers.py`` and discovered at start-up, the way ``admin.py`` is (docs/architecture.md,
"Handlers")."""

import inspect
import re
from collections.abc import Callable

from scheduler_core.exceptions import SchedulerError, UnknownHandler

HandlerFn = Callable[..., object]
_registry: dict[str, HandlerFn] = {}
_internal: set[str] = set()
_async: set[str] = set()
NAME_RE = re.compile(r"^[A-Za-z_][\w.:-]{0,199}$")


def handler(name: str, *, internal: bool = False) -> Callable[[HandlerFn], HandlerFn]:
    """Register ``fn(ctx, payload) -> JSON-able result`` under ``name``.

    ``name`` is a dotted identifier such as ``"billing.send_invoice"`` (letters, digits,
    ``_ . : -``; at most 200 characters). Registering a second, different function under a
    name already taken raises SchedulerError, so two apps cannot silently shadow each other.
    An ``internal`` handler runs jobs that code creates through the Python API, but the
    REST API and the admin's Add job form do not offer it (``django_task``: a client would
    otherwise run any of the project's tasks with arguments of its choosing;
    docs/security.md, "Tenants and limits"). An ``async def`` handler
    (inspect.iscoroutinefunction) runs on an event loop in the worker's child, many at
    once (docs/async-handlers.md).
    """
    if not NAME_RE.match(name):
        raise SchedulerError(f"invalid handler name {name!r}")

    def register(fn: HandlerFn) -> HandlerFn:
        existing = _registry.get(name)
        if existing is not None and existing.__qualname__ != fn.__qualname__:
            raise SchedulerError(f"handler {name!r} is already registered to {existing!r}")
        _registry[name] = fn
        if inspect.iscoroutinefunction(fn):
            _async.add(name)
        else:
            _async.discard(name)
        if internal:
            _internal.add(name)
        return fn

    return register


def get_handler(name: str) -> HandlerFn:
    """Return the handler registered as ``name``; raises UnknownHandler."""
    try:
        return _registry[name]
    except (KeyError, TypeError):  # TypeError: an unhashable name such as a list
        raise UnknownHandler(name) from None


def handler_names() -> list[str]:
    """Every registered handler name, sorted."""
    return sorted(_registry)


def creatable_handler_names() -> list[str]:
    """The handler names clients may create jobs of (the REST API, the admin's form):
    every registered one but the internal ones, sorted."""
    return sorted(set(_registry) - _internal)


def is_internal(name: str) -> bool:
    """Whether handler ``name`` was registered ``internal``: no client can create its
    jobs, only the project's own code."""
    return name in _internal


def is_async(name: str) -> bool:
    """Whether handler ``name`` is an ``async def`` (runs on its child's event loop:
    docs/async-handlers.md); False for a sync or unknown one."""
    return name in _async


def autodiscover() -> None:
    """Import ``handlers`` from every installed app (called from JobsConfig.ready)."""
    from django.utils.module_loading import autodiscover_modules

    autodiscover_modules("handlers")
