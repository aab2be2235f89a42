"""A backend for Django's task framework (``django.tasks``) on this scheduler: a task's
``enqueue()`` becomes a one-off job whose run the workers execute like any other run
(docs/django-tasks.md)."""
