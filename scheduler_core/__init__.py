"""What both apps build on: the settings (conf), the exceptions, the handler registry, the
jobs app's tables that runs/ reads (models), the checks a server process makes before it
starts (startup) and the REST foundation every app's API builds on (rest/). It imports
neither app; runs imports it, jobs imports it and runs (docs/architecture.md, "Code
layout and dependency rule"). Not a Django app: its models belong to the jobs app.
"""
