"""The Redis broker, one unit (docs/architecture.md, "Brokers"): ``broker.py`` holds
RedisBroker, which composes the parts below and implements the Broker contract
(runs/brokers/base.py); ``keys.py`` is the key layout, ``wire.py`` the client, script
pipelines and error translation, ``lua/`` the scripts; ``wake.py``, ``inspection.py``,
``limits.py`` and ``books.py`` are its parts (waking idle workers, reporting the working
set, owner limits, lease bookkeeping); ``spread.py`` leases a spread queue while one of
its masters is out of reach."""

from runs.brokers.redis.broker import RedisBroker

__all__ = ["RedisBroker"]
