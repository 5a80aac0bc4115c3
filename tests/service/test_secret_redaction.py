"""Object-store secrets never leave maintd: each outlet (logs, CLI errors, /readyz, stored runs and roots,
`maintd status`, the settings dump and settings errors) is checked with secrets given as storage options
and as environment variables."""

from __future__ import annotations

import io
import json
import logging
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from loguru import logger
from typer.testing import CliRunner

from maintd.cli import app
from maintd.cli._output import user_errors
from maintd.errors import ConfigError, StorageCredentialsError
from maintd.redaction import forget_secrets, is_secret_option, redact_options, redact_secrets, register_secret
from maintd.service.http import HealthServer
from maintd.service.logging import configure_logging
from maintd.service.metrics import Metrics
from maintd.service.records import RunKind, RunStatus
from maintd.service.store import StateStore
from maintd.settings import LoggingSettings, Settings, apply_storage_settings, load_settings
from maintd.storage import clear_storage_options, resolve_options

SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
TOKEN = "FQoGZXIvYXdzEXAMPLEsessionTOKENvalue0123"
SAS = "sv=2024-08-04&ss=b&sig=Zm9vYmFyYmF6cXV4"


@pytest.fixture(autouse=True)
def _clean(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    clear_storage_options()
    forget_secrets()
    monkeypatch.setenv("AWS_SESSION_TOKEN", TOKEN)
    yield
    clear_storage_options()
    forget_secrets()
    logger.remove()
    logger.configure(patcher=None)
    logging.basicConfig(handlers=[], force=True)


def configured(tmp_path: Path) -> Settings:
    settings = Settings.model_validate({
        "state_dir": str(tmp_path),
        "warehouse": {"roots": ["s3://lake/wh"], "storage_options": {
            "aws_region": "eu-west-1", "aws_access_key_id": "AKIAEXAMPLE", "aws_secret_access_key": SECRET}},
    })
    apply_storage_settings(settings)
    return settings


def mentions_secret(text: str) -> bool:
    return SECRET in text or TOKEN in text or "Zm9vYmFyYmF6cXV4" in text


def test_text_redaction_covers_credential_pairs_signed_urls_pem_keys_and_registered_values() -> None:
    assert redact_secrets(f"aws_secret_access_key={SECRET} region=eu") == "aws_secret_access_key=*** region=eu"
    assert redact_secrets(f'{{"aws_session_token": "{TOKEN}", "aws_region": "eu"}}') == \
        '{"aws_session_token": "***", "aws_region": "eu"}'
    assert redact_secrets(f"GET https://acct.blob.core.windows.net/c/x?{SAS}&se=1") == \
        "GET https://acct.blob.core.windows.net/c/x?sv=2024-08-04&ss=b&sig=***&se=1"
    assert redact_secrets("X-Amz-Security-Token: abcdef, X-Amz-Signature=0123abcd") == \
        "X-Amz-Security-Token: ***, X-Amz-Signature=***"
    pem = "key -----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBg\n-----END PRIVATE KEY----- end"
    assert redact_secrets(pem) == "key *** end"
    assert redact_secrets("aws_access_key_id=AKIAEXAMPLE design=2") == "aws_access_key_id=AKIAEXAMPLE design=2"
    kept = "StorageCredentialsError: table s3://lake/t: no credentials; InvalidTokenError: expired"
    assert redact_secrets(kept) == kept, "error class names are not keys"
    prose = "the store refused the credentials: set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY"
    assert redact_secrets(prose) == prose, "an instruction after a key is not its value"
    assert redact_secrets("password: set") == "password: ***" and redact_secrets("token: set-me") == "token: ***"
    register_secret(SECRET)
    register_secret("abc")  # too short to be replaced wherever it appears
    assert redact_secrets(f"signature mismatch for {SECRET}!") == "signature mismatch for ***!"
    assert redact_secrets("abc") == "abc"


def test_secret_option_names() -> None:
    secret = ["aws_secret_access_key", "aws_session_token", "azure_storage_account_key", "azure_storage_sas_key",
              "azure_client_secret", "google_service_account_key", "google_service_account", "password"]
    public = ["aws_access_key_id", "aws_region", "aws_endpoint", "azure_storage_account_name", "azure_client_id",
              "aws_allow_http", "timeout"]
    assert all(is_secret_option(k) for k in secret) and not any(is_secret_option(k) for k in public)
    assert redact_options({"aws_secret_access_key": "x", "aws_region": "eu"}) == {
        "aws_secret_access_key": "***", "aws_region": "eu"}


def test_settings_dump_and_settings_errors_hide_secrets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    settings = configured(tmp_path)
    assert resolve_options("s3://lake/wh/t")["aws_secret_access_key"] == SECRET, "the options are in force"
    assert resolve_options("s3://lake/wh/t")["aws_region"] == "eu-west-1"
    assert not mentions_secret(repr(settings)) and not mentions_secret(str(settings.warehouse))
    assert "eu-west-1" in repr(settings)
    config = tmp_path / "maintd.yaml"
    config.write_text(f"warehouse:\n  prefix_storage_options:\n    not-a-uri:\n      aws_secret_access_key: {SECRET}\n")
    with pytest.raises(ConfigError) as caught:
        load_settings(config)
    assert "not-a-uri" in str(caught.value) and not mentions_secret(str(caught.value))
    monkeypatch.setenv("MAINTD_WAREHOUSE__STORAGE_OPTIONS", json.dumps({"aws_secret_access_key": SECRET}))
    config.write_text("warehouse:\n  roots: [s3://lake/wh]\n")
    from_env = load_settings(config)
    assert from_env.warehouse.storage_options == {"aws_secret_access_key": SECRET}
    assert not mentions_secret(repr(from_env))


def test_logs_hide_storage_secrets_from_options_and_environment(tmp_path: Path) -> None:
    configured(tmp_path)
    out = io.StringIO()
    configure_logging(LoggingSettings(level="INFO"), stream=out)
    logger.info("listing failed: {} (token {})", f"credentials {SECRET} refused", TOKEN)
    logger.bind(detail=f"aws_secret_access_key={SECRET}").warning("request {}", f"https://x/?{SAS}")
    try:
        raise StorageCredentialsError(f"the store refused key {SECRET}")
    except StorageCredentialsError:
        logger.exception("run failed")
    text = out.getvalue()
    assert "listing failed" in text and "run failed" in text
    assert not mentions_secret(text)


def test_cli_errors_hide_secrets(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    configured(tmp_path)
    import typer

    with pytest.raises(typer.Exit) as caught, user_errors():
        raise StorageCredentialsError(f"table s3://lake/wh/t: refused {SECRET} and {TOKEN}")
    assert caught.value.exit_code == 2
    err = capsys.readouterr().err
    assert "refused" in err and not mentions_secret(err)


def test_readyz_hides_secrets(tmp_path: Path) -> None:
    configured(tmp_path)

    def failing() -> bool:
        raise StorageCredentialsError(f"warehouse root s3://lake/wh: key {SECRET} refused; {SAS}")

    with HealthServer(Metrics(), {"warehouse": failing}) as server:
        with pytest.raises(urllib.error.HTTPError) as caught:
            urllib.request.urlopen(f"{server.url}/readyz", timeout=10)
        body = caught.value.read().decode()
    assert caught.value.code == 503 and "s3://lake/wh" in body and not mentions_secret(body)


def test_stored_runs_roots_and_maintd_status_hide_secrets(tmp_path: Path) -> None:
    configured(tmp_path)
    db = tmp_path / "maintd.db"
    store = StateStore(f"sqlite:///{db}")
    try:
        run = store.start_run("s3://lake/wh/t", RunKind.MAINTENANCE, holder="pod:1")
        store.finish_run(run, RunStatus.FAILED, error=f"StorageCredentialsError: key {SECRET} refused ({TOKEN})")
        store.record_root_scan("s3://lake/wh", error=f"cannot list: aws_secret_access_key={SECRET}",
                               error_type="StorageCredentialsError")
        stored = store.get_run(run)
        assert stored is not None and stored.error and not mentions_secret(stored.error)
        assert not mentions_secret(store.list_tables()[0].last_error or "")
        assert not mentions_secret(store.list_roots()[0].error or "")
    finally:
        store.close()
    config = tmp_path / "maintd.yaml"
    config.write_text(f"store:\n  url: sqlite:///{db}\n")
    runner = CliRunner()
    for args in (["status", "--config", str(config)], ["status", "--config", str(config), "--json"],
                 ["history", "--config", str(config)]):
        result = runner.invoke(app, args)
        assert result.exit_code == 0, result.output
        assert "s3://lake/wh" in result.stdout and not mentions_secret(result.stdout), args
    assert "failing" in runner.invoke(app, ["status", "--config", str(config)]).stdout
