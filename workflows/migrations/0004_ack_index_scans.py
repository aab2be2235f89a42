# The one-call ack (0003) plans its statements with sequential scans off
# (enable_seqscan = off, for the function's own statements only): every one of them finds
# its rows by key (ids, a workflow run and its nodes, an edge's ends), for which an index
# is right at any size. With statistics taken when every node run had succeeded, the
# readiness read's NOT EXISTS over the upstream node runs was planned as a sequential
# scan of all node runs per candidate, so a root with 998 downstream nodes read a million
# rows and its ack took 0.6-1.8 s (tests/test_workflows_stale_stats.py; BENCHMARKS.md,
# "Workflows (W7)"). Off only penalises a sequential scan: a table with no usable index
# is still read.

import importlib

from django.db import migrations

BEFORE = importlib.import_module("workflows.migrations.0002_ack_function")
URGENT = importlib.import_module("workflows.migrations.0003_ack_urgent")


def forward(apps, schema_editor):
    BEFORE._run(schema_editor, f"ALTER FUNCTION {URGENT.NEW_SIGNATURE} SET enable_seqscan = off")


def backward(apps, schema_editor):
    BEFORE._run(schema_editor, f"ALTER FUNCTION {URGENT.NEW_SIGNATURE} RESET enable_seqscan")


class Migration(migrations.Migration):

    dependencies = [("workflows", "0003_ack_urgent")]

    operations = [migrations.RunPython(forward, backward)]
