"""Where a project registers its handlers: ``from jobs.registry import handler``
(docs/python-api.md, "Handlers"). The registry itself is scheduler_core/registry.py,
below both apps, since the worker (runs/) looks handlers up and runs imports nothing of
jobs but its models (docs/architecture.md, "Code layout and dependency rule")."""

from scheduler_core.registry import get_handler, handler, handler_names

__all__ = ["get_handler", "handler", "handler_names"]
