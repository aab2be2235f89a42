"""The API, admin and Python-API tests on the embedded default: SQLite as the default
database, with the database broker. The suite's default is PostgreSQL; here the modules
below run again in a pytest of their own whose TEST_DATABASE_URL is a SQLite file, as a
fresh clone's `scripts/demo` runs. A test whose behaviour is PostgreSQL's own carries
``@pytest.mark.postgresql_only(reason)`` and is skipped there, saying why.

GET /api/runs/ and /api/dead-letter/ answered 500 on SQLite for an owner of 2 to 100
jobs (scheduler_core/rest/owner_lists.py): the suite had never run them there.
"""

import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT

# The modules run on SQLite too. Not here: those that take the `broker` fixture (the
# workflow engine's and most daemons' tests), which runs them on the database-sqlite
# pair itself (tests/conftest.py), and the benchmarks'.
EMBEDDED = [
    "tests/test_run_lists.py", "tests/test_job_spec.py", "tests/test_api_jobs.py",
    "tests/test_api_validation.py", "tests/test_api_runs.py", "tests/test_api_run_now.py",
    "tests/test_python_api_validation.py", "tests/test_job_status.py",
    "tests/test_run_list_fields.py", "tests/test_admin.py", "tests/test_admin_run_page.py",
    "tests/test_admin_dashboard.py", "tests/test_admin_edit_schedule.py",
    "tests/test_admin_resume.py", "tests/test_api_isolation.py",
    "tests/test_api_permissions.py", "tests/test_dead_letter_bulk.py",
    "tests/test_api_idempotency.py", "tests/test_unique_jobs.py", "tests/test_api_limits.py",
    "tests/test_tenant_bounds.py", "tests/test_workflows_api.py",
    "tests/test_workflows_admin.py", "tests/test_node_jobs_listed.py",
    "tests/test_api_json_errors.py", "tests/test_api_seed.py", "tests/test_api_tokens.py",
    "tests/test_api_token_command.py", "tests/test_workflows_api_isolation.py",
    "tests/test_api_throttling.py", "tests/test_ownership.py",
    "tests/test_api_bulk_parser.py", "tests/test_admin_list_widths.py",
    "tests/test_swagger_offline.py", "tests/test_backfill_api.py",
    "tests/test_list_query_params.py", "tests/test_job_spec_bounds.py",
    "tests/test_workflows_metrics.py", "tests/test_workflows_node_jobs.py",
    "tests/test_workflows_validation.py", "tests/test_workflows_ready_property.py",
    "tests/test_scheduler.py", "tests/test_daemon_fault_isolation.py",
    "tests/test_daemon_start_failure.py", "tests/test_daemon_stop.py",
    "tests/test_catch_up_runs.py",
]


@pytest.mark.slow
def test_the_api_admin_and_python_api_tests_pass_on_sqlite(tmp_path):
    env = dict(os.environ,
               TEST_DATABASE_URL=f"sqlite:///{tmp_path / 'embedded.sqlite3'}",
               SCHEDULER_REDIS_PREFIX=os.environ.get("SCHEDULER_REDIS_PREFIX", "schedtest")
               + "-embedded")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "not slow",
         "--tb=short", *EMBEDDED], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=1800)

    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
