"""Reproducible installs (CONTRIBUTING.md, "Dependencies"): every dependency in pyproject.toml has
an upper bound on its major, and requirements.lock pins a version of each base and [dev]
dependency that its range allows, so `pip install -c requirements.lock -e .[dev]` installs
what CI tested."""

import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]


def declared(groups=("dev", "bench", "otel")) -> dict[str, list[Requirement]]:
    """Requirements of pyproject.toml: ``{"base": [...], "dev": [...], ...}``."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    found = {"base": [Requirement(r) for r in project["dependencies"]]}
    for group in groups:
        found[group] = [Requirement(r) for r in project["optional-dependencies"][group]]
    return found


def locked() -> dict[str, str]:
    """``{canonical name: version}`` of every pin in requirements.lock."""
    pins = {}
    for line in (ROOT / "requirements.lock").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            requirement = Requirement(line)
            (spec,) = requirement.specifier
            assert spec.operator == "==", line
            pins[canonicalize_name(requirement.name)] = spec.version
    return pins


def test_every_dependency_has_an_upper_bound_on_its_major():
    unbounded = [str(r) for group in declared().values() for r in group
                 if not any(s.operator in {"<", "<=", "==", "~="} for s in r.specifier)]

    assert unbounded == []


def test_the_lock_pins_every_base_and_dev_dependency_within_its_range():
    # The otel extra's API comes in with the dev extra's SDK: CI tests the version pinned.
    pins, requirements = locked(), declared(groups=("dev", "otel"))
    for requirement in requirements["base"] + requirements["dev"] + requirements["otel"]:
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{name} is not in requirements.lock: run scripts/lock"
        assert requirement.specifier.contains(pins[name], prereleases=True), (
            f"requirements.lock pins {name}=={pins[name]}, outside {requirement.specifier}: "
            "run scripts/lock")


def test_the_lock_header_names_the_command_that_regenerates_it():
    header = [line for line in (ROOT / "requirements.lock").read_text().splitlines()[:8]
              if line.startswith("#")]

    assert "#    scripts/lock" in header and (ROOT / "scripts" / "lock").is_file()


def test_every_app_of_the_settings_is_a_package_an_install_ships():
    """A `pip install` outside the checkout ships only the packages pyproject.toml names:
    an app of INSTALLED_APPS missing there imports from the checkout's own folder and
    nowhere else (workflows was missing: ModuleNotFoundError in any other project)."""
    from fnmatch import fnmatch

    from django.conf import settings

    include = tomllib.loads((ROOT / "pyproject.toml").read_text())[
        "tool"]["setuptools"]["packages"]["find"]["include"]
    ours = {app.split(".")[0] for app in settings.INSTALLED_APPS
            if (ROOT / app.split(".")[0]).is_dir()} - {"chaos"}  # tests' settings only
    assert ours, "no app of this checkout found in INSTALLED_APPS"
    assert {app for app in ours if not any(fnmatch(app, p) for p in include)} == set()
