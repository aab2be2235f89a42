"""A pytest plugin for tests/test_scripts.py: writes the temporary folder the tests of a
scripts/test run get (tempfile.gettempdir()) to the file PROBE_TMPDIR_OUT names."""

import os
import tempfile


def pytest_sessionstart(session):
    out = os.environ.get("PROBE_TMPDIR_OUT")
    if out:
        with open(out, "w") as f:
            f.write(tempfile.gettempdir())
