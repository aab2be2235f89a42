"""manage.py of the django-q2 benchmark project (``manage.py qcluster`` runs the cluster)."""

import os
import sys

if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchq.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
