"""docs/prometheus/alerts.yml is valid Prometheus rules (``promtool check rules``) whose
alerts fire when they should (``promtool test rules`` on docs/prometheus/alerts_test.yml),
and every metric the rules and docs/grafana/scheduler.json query is one /metrics
exposes. promtool ships with Debian's prometheus package; without it the promtool tests
skip, saying so."""

import json
import re
import shutil
import subprocess

import pytest

from tests.conftest import ROOT

RULES = ROOT / "docs" / "prometheus" / "alerts.yml"
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool is not installed (Debian: apt-get install prometheus)")


@needs_promtool
def test_promtool_checks_the_rules():
    out = subprocess.run([PROMTOOL, "check", "rules", str(RULES)], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS: 13 rules found" in out.stdout


@needs_promtool
def test_the_rules_fire_on_the_series_of_their_unit_tests():
    out = subprocess.run([PROMTOOL, "test", "rules", "alerts_test.yml"], capture_output=True,
                         text=True, timeout=60, cwd=RULES.parent)
    assert out.returncode == 0, out.stdout + out.stderr


# The collectors' modules, each with what it puts for ``{name}`` in the families it names
# with an f-string.
EXPANSIONS = {"runs/metrics/endpoint.py": ("ready", "delayed", "leased"),
              "runs/metrics/health.py": ("partitions", "shards"),
              "workflows/metrics.py": ()}


def exposed_names() -> set[str]:
    """The metric families the collectors of runs/metrics/endpoint.py, runs/metrics/health.py and
    workflows/metrics.py declare (read from their source: the names passed to the
    *MetricFamily classes)."""
    names = set()
    for module, parts in EXPANSIONS.items():
        source = (ROOT / module).read_text()
        for name in re.findall(r'MetricFamily\(\s*f?"(scheduler_[a-z_{}]+)"', source):
            names |= ({name.replace("{name}", part) for part in parts} if "{name}" in name
                      else {name})
    return names


def queried(text: str) -> set[str]:
    """Metric names a PromQL text uses, without the suffixes Prometheus adds."""
    found = set(re.findall(r"\bscheduler_[a-z_]+", text))
    return {re.sub(r"_(bucket|gsum|gcount|total)$", "", name) for name in found}


def test_the_rules_and_the_dashboard_query_only_exposed_metrics():
    names = exposed_names()
    dashboard = json.loads((ROOT / "docs" / "grafana" / "scheduler.json").read_text())
    exprs = " ".join(target["expr"] for panel in dashboard["panels"]
                     for target in panel.get("targets", []))

    assert queried(RULES.read_text()) - names == set()
    assert queried(exprs) - names == set()
    assert len(queried(exprs)) >= 10
    assert {"scheduler_workflow_runs", "scheduler_workflow_runs_stalled"} <= names
