"""manage.py of the django-vtasks benchmark project (``manage.py runworker`` runs a worker)."""

import os
import sys

if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchvt.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
