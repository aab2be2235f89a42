"""A minimal Django project hosting Celery with django-celery-beat and django-celery-results."""

from .celery import app as celery_app

__all__ = ["celery_app"]
