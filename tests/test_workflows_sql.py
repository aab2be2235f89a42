"""The workflows app's database functions live whole in workflows/sql/ (its __init__ says
how they are changed): after the migrations, every function of the app in pg_proc is a
file's, body and settings alike; no migration edits SQL text by string; a changed file
comes with a migration that applies it again; the ten- and twelve-argument signatures
a rolling deploy's older workers call still ack."""

import ast
import hashlib
import re
from pathlib import Path

import pytest
from django.db import connections

from jobs.registry import handler
from runs.models import Run, RunState
from tests.test_workflows_races import lease_all
from workflows import services, sql
from workflows.models import NodeRun

ROOT = Path(__file__).resolve().parent.parent
# Each file's definition (from CREATE on: its header comment may change freely) as the
# newest migration applying it was written for. A changed definition needs a migration
# that applies the file again (sql.apply), or databases migrated before keep the old
# body: add one, then put the new hash here.
APPLIED = {
    "ack_succeeded": "e19cb893d71fc544a662641756f72ebede6c4aae20c176b010dd96f0b23ab9ab",
    "ack_succeeded_compat": "33ada0820e363180f335b716ca040eeb3ccf8e99a7fe51097d5b0854070e8f14",
    "ack_succeeded_untraced": "7d50b3c863823a49f9c38d7ce8f127faf910158e47921cae8e17bc88b091157c",
    "crc32": "90d7ce3349f1e425294989d5dfbbaa406772ef786bc1a3aa50e6a7f6fe1b228c",
}


@handler("wf.compat")
def noop(ctx, payload):
    return None


def defined(name: str) -> dict:
    """What ``name``.sql defines: the function's name, its body between the dollar
    quotes, and its SET clauses as pg_proc.proconfig lists them."""
    text = sql.text(name)
    match = re.search(r"CREATE OR REPLACE FUNCTION (\w+)\(.*?\bAS \$\$(.*)\$\$;\s*\Z", text, re.S)
    assert match, f"workflows/sql/{name}.sql is not one CREATE OR REPLACE FUNCTION"
    head = text[:match.start(2)]
    settings = [f"{k}={v}" for k, v in re.findall(r"^SET (\w+) = (\S+)$", head, re.M)]
    return {"name": match.group(1), "body": match.group(2), "settings": settings or None}


@pytest.mark.django_db
def test_every_function_of_the_app_in_the_database_is_a_files_whole_text():
    if connections["default"].vendor != "postgresql":
        pytest.skip("the functions are PostgreSQL's")
    with connections["default"].cursor() as cursor:
        cursor.execute("SELECT proname, prosrc, proconfig FROM pg_proc"
                       " WHERE proname LIKE 'workflows\\_%' ORDER BY oid")
        live = sorted((name, body, config) for name, body, config in cursor.fetchall())
    files = sorted((d["name"], d["body"], d["settings"])
                   for d in map(defined, sorted(APPLIED)))
    assert live == files


def test_the_sql_folder_holds_the_files_the_migrations_apply():
    assert sorted(p.stem for p in sql.SQL_DIR.glob("*.sql")) == sorted(APPLIED)


@pytest.mark.parametrize("name", sorted(APPLIED))
def test_a_changed_sql_file_comes_with_a_migration_that_applies_it(name):
    text = sql.text(name)
    digest = hashlib.sha256(text[text.index("CREATE "):].encode()).hexdigest()
    assert digest == APPLIED[name], (
        f"workflows/sql/{name}.sql changed: add a migration that applies it again "
        f"(workflows/sql/__init__.py), then set APPLIED[{name!r}] to {digest!r}")


def migration_files() -> list[Path]:
    files = sorted(ROOT.glob("*/migrations/0*.py"))
    assert any(p.parts[-3] == "workflows" for p in files)
    return files


def test_no_migration_borrows_another_migrations_text_or_edits_the_apps_sql():
    # Editing another migration's SQL starts by importing it (0003-0005 did until 0007);
    # the app's own migrations apply workflows/sql/ whole, with no str.replace or re.sub.
    # (runs 0010 rewrites constraint definitions read from the catalog: not a text of
    # another migration.)
    offenders = []
    for path in migration_files():
        for node in ast.walk(ast.parse(path.read_text())):
            imported = (isinstance(node, ast.ImportFrom) and ".migrations" in (node.module or "")
                        or isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                        and node.func.attr == "import_module")
            edits = (path.parts[-3] == "workflows" and isinstance(node, ast.Call)
                     and isinstance(node.func, ast.Attribute)
                     and node.func.attr in ("replace", "sub"))
            if imported or edits:
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert offenders == []


@pytest.mark.parametrize("extra", [(), ([], [])], ids=["ten", "twelve"])
@pytest.mark.django_db(transaction=True)
def test_an_older_signature_acks_as_the_one_ack(broker, settings, extra):
    """A worker of a release before the priority rule (ten arguments) or before trace
    contexts (twelve) calls its signature during a rolling deploy: its ack is applied,
    and the next node continued on it."""
    if broker.using != "default" or broker.name != "database":
        pytest.skip("one pair is enough: the call is the database's")
    settings.SCHEDULER = {**settings.SCHEDULER, "BROKER": broker.name}
    nodes = [{"name": n, "handler": "wf.compat", "payload": {}} for n in "ab"]
    workflow = services.create_workflow("old", nodes, [("a", "b")])
    workflow_run = services.start_workflow_run(workflow)
    [lease] = lease_all(broker, 1)
    with connections["default"].cursor() as cursor:
        cursor.execute(
            "SELECT o_kind, o_id FROM workflows_ack_succeeded(%s::bigint[], %s::int[],"
            " %s::text[], %s, %s::text[], %s, %s, %s::text[], %s, %s"
            + ", %s::text[], %s::int[]" * (len(extra) // 2) + ") ORDER BY o_kind",
            [[lease.run_id], [lease.attempt], ['{"old": true}'], "old-worker", ["default"],
             1, 30.0, [], False, 1, *extra])
        rows = cursor.fetchall()

    b = Run.objects.get(pk=NodeRun.objects.get(workflow_run=workflow_run, node__name="b")
                        .run_id)
    assert rows == [("acked", lease.run_id), ("leased", b.pk)]
    assert Run.objects.get(pk=lease.run_id).result == {"old": True}
    assert (b.state, b.worker_id) == (RunState.RUNNING, "old-worker")
