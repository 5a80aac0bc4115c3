"""The chart's alert rules and Grafana dashboard: valid PromQL (promtool), rules that fire when they should
(``promtool test rules``), and queries of metric names the daemon exports, no other.

Without promtool (Debian's ``prometheus`` package) the promtool tests are skipped, unless
``MAINTD_TEST_REQUIRE_PROMTOOL=1`` (``.ci/run`` sets it): then they fail.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml
from prometheus_client.core import Metric

from maintd.service.metrics import Metrics
from maintd.service.records import CheckRecord, RunKind
from maintd.service.store import StateStore

FILES = Path(__file__).resolve().parents[2] / "helm" / "maintd" / "files"
RULES = FILES / "alerts.rules.yaml"
RULE_TESTS = FILES / "alerts.tests.yaml"
DASHBOARD = FILES / "dashboard.json"
#: Series every Prometheus has beside what it scrapes.
PROMETHEUS_OWN = {"up"}
_SUFFIXES = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_count", "_sum", "_created"),
             "gaugehistogram": ("_bucket", "_gcount", "_gsum"), "gauge": ("",), "summary": ("", "_count", "_sum")}


@pytest.fixture(scope="module")
def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        message = "promtool is not installed (apt-get install prometheus)"
        if os.environ.get("MAINTD_TEST_REQUIRE_PROMTOOL") == "1":
            pytest.fail(message)
        pytest.skip(message)
    return found


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=60, check=False, cwd=cwd)


def dashboard_queries() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    queries = [t["expr"] for p in dashboard["panels"] for t in p.get("targets") or [] if t.get("expr")]
    queries += [v["definition"] for v in dashboard["templating"]["list"] if v.get("definition")]
    return queries


def rule_queries() -> list[str]:
    return [rule["expr"] for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]]


def as_promql(query: str) -> str:
    """A dashboard query as plain PromQL: Grafana's variables replaced by values, label_values() by its metric."""
    query = query.replace("$__rate_interval", "5m").replace("$table", ".*")
    found = re.fullmatch(r"label_values\((\w+),\s*\w+\)", query)
    return found.group(1) if found else query


def exported_names() -> set[str]:
    """Every series name a daemon's /metrics can serve: its own families, those read from a store holding a
    table with a full layout, and the probe checks of its HTTP endpoint."""
    with _store() as store:
        metrics = Metrics()
        metrics.attach_store(store)
        metrics.attach_probes({"readiness": dict}, {"readiness": ["spark"]})
        families: list[Metric] = list(metrics.registry.collect())
    names = set()
    for family in families:
        names.update(family.name + suffix for suffix in _SUFFIXES[family.type])
        names.update(sample.name for sample in family.samples)
    return names


@pytest.fixture(scope="module")
def exported() -> set[str]:
    return exported_names()


@contextmanager
def _store() -> Iterator[StateStore]:
    store = StateStore("sqlite://")
    uri = "s3://lake/orders"
    store.register_table(uri)
    layout = {"files": 3, "bytes": 30, "levels": {"L0": {"files": 3, "bytes": 30}}, "read_amplification": 3,
              "oldest_l0_ms": 1, "history_bytes": 5, "pins": 1, "pinned_bytes": 7, "backlog_files": 3,
              "backlog_bytes": 30}
    store.record_checks("r", [CheckRecord(uri, RunKind.MAINTENANCE, store.db_now(), 1, 1, True, layout)])
    store.record_root_scan("s3://lake", tables_found=1)
    store.acquire_leases("r", [uri], 60, 1)
    store.set_targets({uri: {"merge_delay_minutes": 30.0}})
    store.record_tuning(uri, overrides={}, interval_seconds=300.0, reason="r", predicted={}, measured={})
    store.record_measured({uri: ({"merge_delay_minutes": 45.0}, {"merge_delay_minutes": 0.5})})
    try:
        yield store
    finally:
        store.close()


def metric_names(query: str) -> set[str]:
    return set(re.findall(r"\b(maintd_[a-z0-9_]+|up)\b(?!\s*\()", query))


@pytest.mark.parametrize("source", ["rules", "dashboard"])
def test_every_query_uses_only_metric_names_the_daemon_exports(source: str, exported: set[str]) -> None:
    queries = rule_queries() if source == "rules" else dashboard_queries()
    used = set().union(*(metric_names(q) for q in queries))
    assert used and len(used) >= 7
    unknown = used - exported - PROMETHEUS_OWN
    assert not unknown, f"the {source} query metrics the daemon does not export: {sorted(unknown)}"


def test_a_misspelt_metric_would_be_caught(exported: set[str]) -> None:
    assert "maintd_table_failures" in exported and "maintd_fleet_read_amplification_bucket" in exported
    assert metric_names('max(maintd_table_failure{table="x"})') - exported == {"maintd_table_failure"}


def test_the_alert_rules_pass_promtool_check(promtool: str) -> None:
    result = run(promtool, "check", "rules", str(RULES))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 8 rules found" in result.stdout


def test_the_alert_rules_fire_as_their_unit_tests_say(promtool: str) -> None:
    result = run(promtool, "test", "rules", RULE_TESTS.name, cwd=FILES)
    assert result.returncode == 0, result.stdout + result.stderr
    tested = {t["alert_rule_test"][0]["alertname"] for t in yaml.safe_load(RULE_TESTS.read_text())["tests"]}
    alerts = {rule["alert"] for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]}
    assert tested == alerts, f"alerts without a unit test: {sorted(alerts - tested)}"


def test_every_dashboard_query_is_valid_promql(promtool: str, tmp_path: Path) -> None:
    rules = [{"record": f"maintd:dashboard_query_{i}", "expr": as_promql(q)} for i, q in enumerate(dashboard_queries())]
    path = tmp_path / "dashboard-queries.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    result = run(promtool, "check", "rules", str(path))
    assert result.returncode == 0, result.stdout + result.stderr

