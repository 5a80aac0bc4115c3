"""Settings: layers, validation messages, redaction, and the reference documentation."""

from __future__ import annotations

from pathlib import Path

import pytest

from maintd.errors import ConfigError
from maintd.settings import (
    Settings,
    iter_fields,
    load_settings,
    redact_secrets,
    redact_url,
    reference_table,
)

ROOT = Path(__file__).resolve().parents[2]
BEGIN, END = "<!-- BEGIN SETTINGS TABLE -->", "<!-- END SETTINGS TABLE -->"


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No MAINTD_* variable of the caller leaks in; the working directory has no config/maintd.yaml."""
    import os

    for name in list(os.environ):
        if name.startswith("MAINTD_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.chdir(tmp_path)


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "maintd.yaml"
    path.write_text(text)
    return path


def test_every_setting_has_a_default_when_nothing_is_configured(tmp_path: Path) -> None:
    settings = load_settings()
    assert settings.http.port == 9464
    assert settings.spark.master == "local[*]"
    assert settings.reclaim.orphan_grace_hours == 72
    assert settings.store.url == f"sqlite:///{tmp_path / 'state' / 'maintd' / 'maintd.db'}"
    assert settings.policy.path is None


def test_the_yaml_file_overrides_defaults_and_the_environment_overrides_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(tmp_path, "scheduler:\n  max_concurrent_tables: 4\n  jitter_seconds: 5\nlogging:\n  json: true\n")
    monkeypatch.setenv("MAINTD_SCHEDULER__MAX_CONCURRENT_TABLES", "8")
    monkeypatch.setenv("MAINTD_WAREHOUSE__ROOTS", '["/data/a", "/data/b"]')
    settings = load_settings(path)
    assert settings.scheduler.max_concurrent_tables == 8
    assert settings.scheduler.jitter_seconds == 5
    assert settings.scheduler.maintenance_interval_seconds == 300
    assert settings.logging.json_lines is True
    assert settings.warehouse.roots == ["/data/a", "/data/b"]


def test_the_file_comes_from_maintd_config_when_no_path_is_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MAINTD_CONFIG", str(write(tmp_path, "http:\n  port: 8080\n")))
    assert load_settings().http.port == 8080


def test_config_maintd_yaml_in_the_working_directory_is_read_by_default(tmp_path: Path) -> None:
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "maintd.yaml").write_text("http:\n  port: 7000\n")
    assert load_settings().http.port == 7000


def test_a_missing_explicit_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"nope.yaml \(from --config\) does not exist"):
        load_settings(tmp_path / "nope.yaml")


def test_a_file_that_is_not_yaml_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="is not valid YAML"):
        load_settings(write(tmp_path, "store: [unclosed\n"))
    with pytest.raises(ConfigError, match="must hold a mapping"):
        load_settings(write(tmp_path, "- a\n- b\n"))


def test_an_unknown_key_is_named_with_a_hint(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"store\.urll = 'x': Extra inputs are not permitted; remove it"):
        load_settings(write(tmp_path, "store:\n  urll: x\n"))


def test_a_bad_value_names_the_key_the_value_and_the_environment_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MAINTD_HTTP__PORT", "abc")
    with pytest.raises(ConfigError) as caught:
        load_settings(write(tmp_path, "scheduler:\n  max_concurrent_tables: 0\n"))
    message = str(caught.value)
    assert "scheduler.max_concurrent_tables = 0: Input should be greater than or equal to 1" in message
    assert "MAINTD_SCHEDULER__MAX_CONCURRENT_TABLES" in message
    assert "http.port = 'abc'" in message


def test_a_short_orphan_grace_needs_force(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"orphan_grace_hours \(0.5\) is below 1 hour"):
        load_settings(write(tmp_path, "reclaim:\n  orphan_grace_hours: 0.5\n"))
    forced = load_settings(write(tmp_path, "reclaim:\n  orphan_grace_hours: 0.5\n  force_short_grace: true\n"))
    assert forced.reclaim.orphan_grace_hours == 0.5


def test_leases_must_be_renewed_well_before_they_expire(tmp_path: Path) -> None:
    text = "store:\n  lease_duration_seconds: 30\n  lease_renew_interval_seconds: 20\n"
    with pytest.raises(ConfigError, match="at most half of lease_duration_seconds"):
        load_settings(write(tmp_path, text))


def test_a_missing_policy_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"policy file /nowhere/policy\.yaml does not exist"):
        load_settings(write(tmp_path, "policy:\n  path: /nowhere/policy.yaml\n"))


def test_config_errors_never_show_a_database_password(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MAINTD_STORE__URL", "postgresql://maintd:hunter2@db/x")
    with pytest.raises(ConfigError) as caught:
        load_settings(write(tmp_path, "store:\n  lease_duration_seconds: 10\n  lease_renew_interval_seconds: 9\n"))
    assert "hunter2" not in str(caught.value)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("postgresql+psycopg://maintd:s3cret@db:5432/x", "postgresql+psycopg://maintd:***@db:5432/x"),
        ("postgresql://u:p%40ss:w/rd@h/db", "postgresql://u:***@h/db"),
        ("sqlite:////var/lib/maintd/maintd.db", "sqlite:////var/lib/maintd/maintd.db"),
        ("postgresql://user@h/db", "postgresql://user@h/db"),
        ("host=db password=s3cret user=maintd", "host=db password=*** user=maintd"),
        ("a postgresql://a:b@h/x and mysql://c:d@h/y", "a postgresql://a:***@h/x and mysql://c:***@h/y"),
    ],
)
def test_redaction_hides_passwords_and_keeps_the_rest(text: str, expected: str) -> None:
    assert redact_secrets(text) == expected


def test_redact_url_redacts_one_url() -> None:
    assert redact_url("postgresql://maintd:pw@db/x") == "postgresql://maintd:***@db/x"


@pytest.mark.parametrize("name", ["maintd.yaml", "maintd.k8s.yaml"])
def test_the_shipped_config_files_are_valid(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MAINTD_STORE__URL", "postgresql+psycopg://maintd:pw@db/maintd")
    settings = load_settings(ROOT / "config" / name)
    assert isinstance(settings, Settings)


def test_every_setting_is_documented_in_configuration_md() -> None:
    doc = (ROOT / "docs" / "configuration.md").read_text()
    for key, env, _, description in iter_fields():
        assert f"`{key}`" in doc, f"{key} is missing from docs/configuration.md"
        assert f"`{env}`" in doc
        assert description, f"{key} has no description"


def test_the_settings_table_in_configuration_md_is_up_to_date() -> None:
    doc = (ROOT / "docs" / "configuration.md").read_text()
    table = doc.split(BEGIN, 1)[1].split(END, 1)[0].strip()
    assert table == reference_table().strip(), (
        "regenerate it: python -c 'from maintd.settings import reference_table; print(reference_table())'"
    )


def test_every_setting_has_a_description_with_its_unit() -> None:
    for key, _, _, description in iter_fields():
        assert description.rstrip().endswith("."), f"{key}: end the description with its unit, e.g. 'Seconds.'"


# -- MAINTD_ environment variables -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "closest"),
    [
        ("MAINTD_HTTP_PORT", "MAINTD_HTTP__PORT"),
        ("MAINTD_HTPP__PORT", "MAINTD_HTTP__PORT"),
        ("MAINTD_SCHEDULR__JITTER_SECONDS", "MAINTD_SCHEDULER__JITTER_SECONDS"),
        ("maintd_store__urll", "MAINTD_STORE__URL"),
    ],
)
def test_an_unknown_maintd_variable_is_refused_naming_it_and_the_closest_setting(
    name: str, closest: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(name, "9000")
    with pytest.raises(ConfigError) as caught:
        load_settings()
    message = str(caught.value)
    assert f"environment variable {name} is not a maintd setting; did you mean {closest}?" in message
    assert "\n" not in message


def test_a_list_that_is_not_json_names_the_variable_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MAINTD_WAREHOUSE__ROOTS", "/data/a,/data/b")
    with pytest.raises(ConfigError) as caught:
        load_settings()
    assert str(caught.value).startswith("environment variable MAINTD_WAREHOUSE__ROOTS is not JSON")
    assert """MAINTD_WAREHOUSE__ROOTS='["/data/a", "/data/b"]'""" in str(caught.value)
    assert "\n" not in str(caught.value)
    monkeypatch.setenv("MAINTD_WAREHOUSE__ROOTS", '{"a": 1}')
    with pytest.raises(ConfigError, match="MAINTD_WAREHOUSE__ROOTS holds a list, not dict"):
        load_settings()


def test_the_config_file_variable_test_variables_and_kubernetes_service_links_are_not_settings_but_allowed(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("MAINTD_CONFIG", str(write(tmp_path, "http:\n  port: 8080\n")))
    monkeypatch.setenv("MAINTD_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
    for name, value in {"MAINTD_SERVICE_HOST": "10.0.0.9", "MAINTD_SERVICE_PORT": "9464",
                        "MAINTD_SERVICE_PORT_HTTP": "9464", "MAINTD_PORT": "tcp://10.0.0.9:9464",
                        "MAINTD_PORT_9464_TCP_ADDR": "10.0.0.9", "MAINTD_PORT_9464_TCP_PROTO": "tcp"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("MAINTD_SPARK__CONF__SPARK_UI_ENABLED", "false")  # below a mapping: any key
    monkeypatch.setenv("MAINTD_WORKER_PRELOAD", "0")  # the Spark workers' daemon module's: inherited locally
    monkeypatch.setenv("MAINTD_WORKER_PRELOADED", "812")
    assert load_settings().http.port == 8080


def test_the_worker_variables_allowed_are_the_ones_the_daemon_module_reads_and_sets() -> None:
    import maintd.pyspark_daemon as d
    from maintd.settings_environment import WORKER_VARIABLES

    assert set(WORKER_VARIABLES) == {d.PRELOAD_ENV, d.PRELOADED_ENV}


def test_a_lone_service_port_like_name_is_still_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MAINTD_METRICS_PORT", "9464")  # no MAINTD_METRICS_SERVICE_HOST: not a service link
    with pytest.raises(ConfigError, match="MAINTD_METRICS_PORT is not a maintd setting"):
        load_settings()


def test_the_cli_prints_one_line_for_a_bad_variable_without_a_traceback(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("MAINTD_")}
    for name, value in (("MAINTD_WAREHOUSE__ROOTS", "/data/a"), ("MAINTD_HTTP_PORT", "1")):
        result = subprocess.run([sys.executable, "-m", "maintd", "gc", "--dry-run"], env={**env, name: value},
                                capture_output=True, text=True, cwd=tmp_path, timeout=120, check=False)
        assert result.returncode == 2
        assert result.stderr.count("\n") == 1 and name in result.stderr and "Traceback" not in result.stderr
