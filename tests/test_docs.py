"""The docs agree with the code (docs/architecture.md, "Configuration"): every setting,
``manage.py`` command and REST endpoint that README.md or docs/*.md names exists, every
document they name is in the repository, and nothing in the repository points outside it.

The truth is derived, not listed: settings from scheduler_core/conf.py's DEFAULTS,
Django's settings, the environment variables and constants the code reads, and the
Procfile; commands from Django's command registry; endpoints from the URL resolver.
"""

import ast
import re
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import get_commands
from django.urls import Resolver404, resolve

from jobs.spec import DEPRECATED
from scheduler_core import conf
from tests.test_prometheus_rules import exposed_names, queried

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
APP_CODE = ["scheduler_core", "jobs", "runs", "scheduler_project", "scheduler_tasks", "workflows",
            "chaos"]
CAPS = re.compile(r"[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+")
# Names the docs use that belong to other software, not to this project's configuration.
NOT_OURS = {
    "REMOTE_ADDR": "the WSGI request variable Django reads the client address from",
    "FAKETIME_DONT_FAKE_MONOTONIC": "libfaketime's switch, named to warn against it",
}


def doc_ids(paths):
    return [str(p.relative_to(ROOT)) for p in paths]


def prose(text: str) -> str:
    """``text`` without its fenced code blocks, whose examples may name their own variables."""
    return re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)


def names_in(paths) -> set[str]:
    """Every ALL_CAPS identifier and string constant of the Python files ``paths``: their
    constants, the settings they read and the environment variables they look up."""
    found = set()
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Name):
                found.add(node.id)
            elif isinstance(node, ast.Attribute):
                found.add(node.attr)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                found.add(node.value)
    return {name for name in found if CAPS.fullmatch(name)}


def names_in_code() -> set[str]:
    """names_in the application's code."""
    return names_in(path for package in APP_CODE for path in (ROOT / package).rglob("*.py"))


def procfile_variables() -> set[str]:
    return shell_variables(ROOT / "Procfile")


def shell_variables(*paths: Path) -> set[str]:
    """The ``$NAME`` / ``${NAME...}`` variables the shell files ``paths`` read."""
    return {name for path in paths
            for name in re.findall(r"\$\{?([A-Z][A-Z0-9_]*)", path.read_text())}


KNOWN = (set(conf.DEFAULTS) | {f"SCHEDULER_{name}" for name in conf.DEFAULTS}
         | {name for name in dir(settings) if name.isupper()} | names_in_code()
         | procfile_variables() | set(NOT_OURS)
         | shell_variables(*(ROOT / "scripts").iterdir(), ROOT / ".ci" / "run"))


@pytest.mark.parametrize("doc", DOCS, ids=doc_ids(DOCS))
def test_every_scheduler_setting_a_doc_names_exists(doc):
    named = set(re.findall(r"\bSCHEDULER_[A-Z0-9_]*[A-Z0-9]\b", doc.read_text()))

    assert named - {f"SCHEDULER_{name}" for name in conf.DEFAULTS} == set(), (
        f"{doc.name} names settings scheduler_core/conf.py does not have")


@pytest.mark.parametrize("doc", DOCS, ids=doc_ids(DOCS))
def test_every_setting_or_variable_a_doc_names_is_read_by_the_code(doc):
    named = set(CAPS.findall(prose(doc.read_text())))

    # docs/testing.md describes tests/conftest.py too.
    known = KNOWN | (names_in([ROOT / "tests" / "conftest.py"])
                     if doc.name == "testing.md" else set())
    assert named - known == set(), f"{doc.name} names what no code, setting or Procfile has"


def test_the_docs_index_lists_every_page():
    """docs/README.md says it lists every page: a page it lacks is found only by chance
    (performance.md was missing)."""
    index = (ROOT / "docs" / "README.md").read_text()
    linked = set(re.findall(r"\]\(([\w.-]+\.md)\)", index))
    pages = {p.name for p in (ROOT / "docs").glob("*.md")} - {"README.md"}
    assert pages - linked == set(), "docs/README.md does not list these pages"


@pytest.mark.parametrize("doc", DOCS, ids=doc_ids(DOCS))
def test_every_manage_py_command_a_doc_names_exists(doc):
    named = set(re.findall(r"manage\.py\s+([a-z][a-z_]*)(?![\w.…])", doc.read_text()))

    assert named - set(get_commands()) == set(), f"{doc.name} names unknown commands"


def endpoint_paths(text: str) -> set[str]:
    """``/api/...`` paths and the probes a text names, without query strings."""
    paths = re.findall(r"(?<![\w.])(/api/[\w/{}<>.-]*|/healthz|/readyz|/metrics)", text)
    return {path.rstrip(".") for path in paths}


def resolves(path: str) -> bool:
    """Whether ``path``, its ``{id}``/``<id>`` placeholders filled with 1, is a URL."""
    concrete = re.sub(r"\{[^}/]*\}|<[^>/]*>", "1", path)
    try:
        resolve(concrete)
    except Resolver404:
        return False
    return True


@pytest.mark.parametrize("doc", DOCS, ids=doc_ids(DOCS))
def test_every_endpoint_a_doc_names_resolves(doc):
    named = endpoint_paths(doc.read_text())

    assert sorted(p for p in named if not resolves(p)) == [], f"{doc.name}: no such URL"


def test_an_endpoint_that_does_not_exist_is_caught():
    assert resolves("/api/jobs/{id}/pause/") and resolves("/api/dead-letter/<id>/")
    assert not resolves("/api/jobs/{id}/explode/")


@pytest.mark.parametrize("doc", DOCS, ids=doc_ids(DOCS))
def test_every_markdown_file_a_doc_names_is_in_the_repository(doc):
    named = set(re.findall(r"(?<![\w/.:-])([\w./-]+\.md)\b", prose(doc.read_text())))
    missing = [name for name in named
               if not (doc.parent / name).is_file() and not (ROOT / name).is_file()]

    assert missing == [], f"{doc.name} names documents the repository lacks"


def test_every_metric_family_the_collectors_expose_is_named_in_a_doc():
    text = " ".join(doc.read_text() for doc in DOCS)

    assert exposed_names() - queried(text) == set(), "a /metrics family no doc names"


# A job field's old names (jobs/spec.py, DEPRECATED) belong only on the page that explains
# them; an example elsewhere that used one taught a name the next release refuses.
# "schedule" is left out: it is a workflow's own field (docs/workflows.md, "Schedules").
OLD_NAMES = sorted(name for name in DEPRECATED if name != "schedule")
OLD_FIELD = re.compile(r"\b(" + "|".join(OLD_NAMES) + r")\b")


@pytest.mark.parametrize("doc", DOCS, ids=doc_ids(DOCS))
def test_no_doc_but_the_job_fields_page_uses_an_old_field_name(doc):
    if doc == ROOT / "docs" / "api.md":
        pytest.skip("docs/api.md, \"Job fields\", is where the old names are explained")
    found = [f"{number}: {line.strip()}"
             for number, line in enumerate(doc.read_text().splitlines(), 1)
             if OLD_FIELD.search(line)]

    assert found == [], f"{doc.name} uses a deprecated job field name (docs/api.md)"


# Spelt in pieces so that the pattern itself is not a reference the check (or a grep for
# one) finds.
OUTSIDE = re.compile("|".join([r"\.\./" + "shared", r"\bshared" + "/", "DESIGN" + r"\.md",
                               "STYLE" + r"\.md", "/tmp/" + "coord", r"\bresearch/",
                               r"\b[Ii]ssues? #?\d"]))
SKIP_DIRS = {".venv", ".venvs", ".git", "node_modules", "__pycache__", ".pytest_cache", "data"}


def repository_texts():
    for path in ROOT.rglob("*"):
        if SKIP_DIRS.isdisjoint(path.relative_to(ROOT).parts) and path.is_file() and (
                path.suffix in {".py", ".md", ".toml", ".lua", ".sh", ".html", ".txt", ".cfg"}
                or path.parent.name in {"scripts", ".ci"} or path.name == "Procfile"):
            yield path


def test_nothing_in_the_repository_refers_to_anything_outside_it():
    found = [f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
             for path in repository_texts() if path != Path(__file__)
             for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
             if OUTSIDE.search(line)]

    assert found == []
