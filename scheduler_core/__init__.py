"""What every app builds on: the settings (conf), the exceptions, the handler registry,
the checks a server process makes before it starts (startup) and the REST foundation
every app's API builds on (rest/). It is the lowest layer and imports no app
(docs/architecture.md, "Code layout and dependency rule"). Not a Django app: it has no
models.
"""
