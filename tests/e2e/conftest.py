"""Browser fixtures for the admin's end-to-end tests: Debian's chromium driven headless by
Playwright (never a downloaded browser), a real dispatcher and worker on the test
database, and a logged-in operator.

Playwright's sync API keeps an event loop running in this thread, and Django refuses ORM
calls from a thread with a running loop; the tests need both, so DJANGO_ALLOW_ASYNC_UNSAFE
is set for the e2e modules only, while the browser is open.
"""

import os
import re
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model

from tests.conftest import daemon_env, flush_redis, start_daemon, stop

# Debian's chromium, or the one CHROMIUM names (Homebrew's cask on macOS).
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]
OPERATOR = ("operator", "a long operator password")


def pytest_collection_modifyitems(config, items):
    """Without chromium the browser tests are skipped, saying why, before any database or
    daemon is set up for them (scripts/test refuses to start without it instead)."""
    if Path(CHROMIUM).exists():
        return
    here = Path(__file__).parent
    skip = pytest.mark.skip(reason=f"{CHROMIUM} is missing: apt-get install chromium, "
                                   "brew install --cask chromium, or set CHROMIUM")
    for item in items:
        if here in item.path.parents:
            item.add_marker(skip)


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            yield browser
            browser.close()


@pytest.fixture(scope="module")
def daemons(django_db_setup, django_db_blocker, tmp_path_factory):
    """A dispatcher and a worker (redis broker) on the test database; the worker
    heartbeats every second so the dashboard sees it at once."""
    flush_redis()
    logs = tmp_path_factory.mktemp("daemons")
    env = daemon_env("redis", heartbeat_s=1, dispatch_interval_s=0.05)
    procs = [start_daemon(["rundispatcher"], env, logs / "dispatcher.log"),
             start_daemon(["runworker", "--queues", "default", "--concurrency", "2"], env,
                          logs / "worker.log")]
    yield procs
    stop(*procs)
    flush_redis()
    for proc, name in zip(procs, ("dispatcher", "worker"), strict=True):
        assert proc.returncode == 0, (logs / f"{name}.log").read_text()[-3000:]


@pytest.fixture
def page(browser, live_server, transactional_db):
    """A browser tab logged in to the admin as a superuser, through the login form."""
    get_user_model().objects.create_superuser(OPERATOR[0], "op@example.com", OPERATOR[1])
    context = browser.new_context(base_url=live_server.url,
                                  viewport={"width": 1400, "height": 900})
    context.set_default_timeout(15_000)
    tab = context.new_page()
    tab.goto("/admin/login/")
    tab.fill("#id_username", OPERATOR[0])
    tab.fill("#id_password", OPERATOR[1])
    tab.click("input[type=submit]")
    tab.wait_for_url(re.compile(r"/admin/$"))
    yield tab
    context.close()

