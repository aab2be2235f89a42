"""Take the admin screenshots of README.md and docs/admin.md from a running server (not a test).

    python tests/e2e/screenshots.py http://127.0.0.1:8140 demo demo docs/screenshots

Needs Debian's chromium (/usr/bin/chromium) and a server with some history, e.g. after
``manage.py loaddemo`` and a minute of ``manage.py runall --web`` (docs/admin.md says how).
Writes jobs.png, run.png, dead-letter.png and dashboard.png.
"""

import re
import sys
from pathlib import Path

from playwright.sync_api import sync_playwright

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]


def main(base: str, username: str, password: str, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        # A common laptop window, the navigation sidebar left open as a new user first
        # sees it (docs/admin.md, "Screen width").
        page = browser.new_page(viewport={"width": 1366, "height": 768})
        page.goto(f"{base}/admin/login/")
        page.fill("#id_username", username)
        page.fill("#id_password", password)
        page.click("input[type=submit]")
        page.wait_for_url(re.compile(r".*/admin/$"))

        page.goto(f"{base}/admin/jobs/job/?q={username}")  # the jobs of that user
        page.screenshot(path=out / "jobs.png", full_page=True)

        # A run with several attempts and log lines: the flaky demo job's.
        page.goto(f"{base}/admin/runs/run/?q=fails+3+times")
        page.locator("#result_list tbody tr th a").first.click()
        page.wait_for_selector(".run-attempts")
        page.screenshot(path=out / "run.png", full_page=True)

        page.goto(f"{base}/admin/runs/deadrun/")
        page.screenshot(path=out / "dead-letter.png", full_page=True)

        page.goto(f"{base}/admin/dashboard/")
        page.wait_for_timeout(4000)  # one refresh, so the page shows polled figures
        page.screenshot(path=out / "dashboard.png", full_page=True)
        browser.close()


if __name__ == "__main__":
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    main(sys.argv[1].rstrip("/"), sys.argv[2], sys.argv[3], Path(sys.argv[4]))
