"""manage.py of the django-tasks-db benchmark project (``manage.py db_worker`` runs a worker)."""

import os
import sys

if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchdjt.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
