"""Broker selection: ``get_broker()`` returns the configured broker for a database alias
(``SCHEDULER_BROKER``, or redis when REDIS_URL is set, else database)."""

from runs.brokers.base import Broker
from scheduler_core import conf

_instances: dict[tuple[str, str], Broker] = {}


def get_broker(using: str = "default", name: str | None = None) -> Broker:
    """The broker ``name`` ("redis" or "database"; default: configured) over the runs in
    database alias ``using``. Instances are cached per (name, alias)."""
    name = name or conf.broker_name()
    key = (name, using)
    if key not in _instances:
        if name == "redis":
            from runs.brokers.redis import RedisBroker

            _instances[key] = RedisBroker(using)
        else:
            from runs.brokers.database import DatabaseBroker

            _instances[key] = DatabaseBroker(using)
    return _instances[key]


__all__ = ["Broker", "get_broker"]
