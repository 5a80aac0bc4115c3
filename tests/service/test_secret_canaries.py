"""Canary secrets of every kind never leave maintd: not in an error, a log line, ``repr``, ``--json``, the
driver JVM's log lines, nor the environment of a child process.

One canary of each kind: an AWS secret key, a GCS service account key (a PEM key inside the JSON key file), an
Azure account key and SAS token, and a PostgreSQL password with spaces and special characters. Every outlet
redacts through :func:`maintd.redaction.redact_secrets` (errors when they are made, log sinks, settings and
options ``repr``, the command line), and children get :func:`maintd.redaction.child_environment`.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
from loguru import logger
from typer.testing import CliRunner

from maintd.cli import app
from maintd.errors import CommitStateUnknownError, StorageError
from maintd.redaction import child_environment, forget_secrets, withheld_from_children
from maintd.service.logging import configure_logging
from maintd.settings import Settings, apply_storage_settings
from maintd.storage import StorageOptions, clear_storage_options
from maintd.storage.objectstore import ObjectStoreStorage

AWS_SECRET = "AWScanarySECRETkey/with+slash0123456789"
PEM_BODY = "MIIEvQIBADANBgkqhkiGcanaryGCSprivateKEYbody0123456789ABCDEFabcdef"
GCS_KEY = json.dumps({"type": "service_account", "client_email": "w@p.iam.gserviceaccount.com",
                      "private_key": f"-----BEGIN PRIVATE KEY-----\n{PEM_BODY}\n-----END PRIVATE KEY-----\n"})
AZURE_KEY = "AZcanaryACCOUNTkey0123456789abcdefghijklmnopqrstuv=="
AZURE_SIG = "AZcanarySIGvalue0123456789"
AZURE_SAS = f"sv=2021-08-06&ss=b&srt=sco&sp=rl&se=2099-01-01T00%3A00%3A00Z&sig={AZURE_SIG}"
PG_PASSWORD = "pg canary p@ss:w/rd é%!"
PG_URL = f"postgresql+psycopg://postgres:{quote(PG_PASSWORD, safe='')}@127.0.0.1:5432/test"
CANARIES = (AWS_SECRET, PEM_BODY, AZURE_KEY, AZURE_SIG, PG_PASSWORD, quote(PG_PASSWORD, safe=""))


def leaked(text: str) -> list[str]:
    return [c for c in CANARIES if c in text]


@pytest.fixture(autouse=True)
def _secrets(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The canaries as maintd is configured with them: settings (store URL, storage options) and environment."""
    clear_storage_options()
    forget_secrets()
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", AWS_SECRET)
    monkeypatch.setenv("MAINTD_STORE__URL", PG_URL)
    yield
    clear_storage_options()
    forget_secrets()
    logger.remove()


def settings(tmp_path: Path) -> Settings:
    configured = Settings.model_validate({
        "state_dir": str(tmp_path), "store": {"url": PG_URL},
        "warehouse": {"roots": ["s3://lake/wh", "gs://lake/wh", "az://lake/wh"], "prefix_storage_options": {
            "s3://lake": {"aws_access_key_id": "AKIAEXAMPLE", "aws_secret_access_key": AWS_SECRET},
            "gs://lake": {"google_service_account_key": GCS_KEY},
            "az://lake": {"azure_storage_account_name": "acct", "azure_storage_account_key": AZURE_KEY,
                          "azure_storage_sas_key": AZURE_SAS}}},
    })
    apply_storage_settings(configured)
    return configured


def quoting_every_canary() -> str:
    return " | ".join([f"aws_secret_access_key={AWS_SECRET}", f"key file {GCS_KEY}", f"body {PEM_BODY}",
                       f"account key {AZURE_KEY}", f"https://acct.blob.core.windows.net/c/t/f.parquet?{AZURE_SAS}",
                       f"connecting to {PG_URL}", f"password {PG_PASSWORD!r}"])


def test_errors_hide_every_canary_whoever_prints_them(tmp_path: Path) -> None:
    settings(tmp_path)
    for error in (StorageError(quoting_every_canary()),
                  CommitStateUnknownError(quoting_every_canary(), version=1, txn_id="t")):
        assert not leaked(str(error)) and not leaked(repr(error)) and not leaked(str(error.args))


def test_log_lines_hide_every_canary(tmp_path: Path) -> None:
    configured = settings(tmp_path)
    for json_lines in (False, True):
        out = io.StringIO()
        configure_logging(configured.logging.model_copy(update={"json_lines": json_lines}), stream=out)
        logger.info("quoting {}", quoting_every_canary())
        logger.bind(detail=quoting_every_canary()).warning("with extra")
        try:
            raise StorageError("x") from RuntimeError(quoting_every_canary())
        except StorageError:
            logger.exception("failed")
        assert "quoting" in out.getvalue() and not leaked(out.getvalue())


def test_repr_of_settings_options_and_storages_hides_every_canary(tmp_path: Path) -> None:
    configured = settings(tmp_path)
    assert not leaked(repr(configured)) and not leaked(str(configured))
    assert "postgres:***@127.0.0.1" in repr(configured.store)
    for prefix, options in configured.warehouse.storage_prefixes().items():
        assert not leaked(repr(StorageOptions.of(options))), prefix
    storage = ObjectStoreStorage("az://lake/wh/t", {"azure_storage_account_name": "acct",
                                                    "azure_storage_sas_key": AZURE_SAS})
    assert not leaked(repr(storage))


def drop_schema(schema: str) -> None:
    from maintd.service.store import StateStore

    store = StateStore(PG_URL, db_schema=schema, create=False)
    try:
        store.drop_schema()
    finally:
        store.close()


def test_the_command_line_and_its_json_hide_every_canary(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """``maintd status --json`` on a PostgreSQL store whose URL holds the password (trust authentication lets
    any password in), the settings dump, and a failing command's error."""
    if not os.environ.get("MAINTD_TEST_POSTGRES_URL"):
        pytest.skip("MAINTD_TEST_POSTGRES_URL is not set; CI sets it")
    runner = CliRunner()
    schema = f"maintd_test_{uuid.uuid4().hex[:12]}"  # a schema of its own: the shared database is left alone
    env = {"MAINTD_STORE__URL": PG_URL, "MAINTD_STORE__DB_SCHEMA": schema, "AWS_SECRET_ACCESS_KEY": AWS_SECRET}
    request.addfinalizer(lambda: drop_schema(schema))
    for args, ok in ((["store", "upgrade"], True), (["status", "--json"], True), (["status"], True),
                     (["history", "--json"], True), (["table", "describe", "az://lake/wh/t", "--json"], False)):
        result = runner.invoke(app, args, env=env)
        assert (result.exit_code == 0) is ok, (args, result.output)
        assert not leaked(result.output), args


JVM_LINES = textwrap.dedent("""
    import json, os, sys
    sys.path.insert(0, {tests!r})
    from maintd.settings import LoggingSettings
    from maintd.service.logging import configure_logging
    from maintd.redaction import register_secrets, register_url_password
    register_secrets({secrets!r})
    register_url_password({url!r})
    configure_logging(LoggingSettings(json_lines={json_lines}), own_stderr=True)
    for line in {lines!r}:  # what the driver JVM (log4j2) and its Python workers print to fd 2
        os.write(2, (line + "\\n").encode())
    # at exit, maintd waits until every line written to fd 2 has been forwarded
""")


@pytest.mark.parametrize("json_lines", [False, True])
def test_the_driver_jvms_log_lines_are_redacted_on_their_way_out(json_lines: bool) -> None:
    lines = [f"26/11/28 10:00:00 ERROR Executor: failed https://acct.blob.core.windows.net/c/f?{AZURE_SAS}",
             json.dumps({"text": f"WARN store {PG_URL}", "record": {"message": f"key {AZURE_KEY}"}}),
             f"py4j: aws_secret_access_key={AWS_SECRET} key body {PEM_BODY}"]
    script = JVM_LINES.format(tests=str(Path(__file__).parent), secrets=[AWS_SECRET, GCS_KEY, AZURE_KEY, AZURE_SAS],
                              url=PG_URL, json_lines=json_lines, lines=lines)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "ERROR Executor" in done.stderr and not leaked(done.stderr), done.stderr


def test_children_get_no_state_store_credentials(tmp_path: Path) -> None:
    settings(tmp_path)
    env = child_environment()
    assert "MAINTD_STORE__URL" not in env and not leaked(json.dumps({k: v for k, v in env.items()
                                                                     if not k.startswith("AWS_")}))
    assert env["AWS_SECRET_ACCESS_KEY"] == AWS_SECRET  # workers read tables with the standard credentials
    with withheld_from_children():
        assert "MAINTD_STORE__URL" not in os.environ
    assert os.environ["MAINTD_STORE__URL"] == PG_URL


LOCAL_CHILD = textwrap.dedent("""
    import os, sys, threading
    from pathlib import Path
    sys.path.insert(0, {tests!r})
    from waiting import wait_until
    from maintd.settings import Settings
    Settings.model_validate({{"store": {{"url": os.environ["MAINTD_STORE__URL"]}}}})
    from execution.helpers import make_table, plan_all
    from maintd.execution import ExecutionOptions, run_plan
    table, _ = make_table(Path({tmp!r}) / "t", commits=4, buckets=1)
    markers = Path({tmp!r}) / "markers"
    options = ExecutionOptions(in_process_threads=1, faults={{"*": f"hold_once:{{markers}}"}})
    run = threading.Thread(target=run_plan, args=(plan_all(table, "compact"), table, None, options))
    run.start()
    child = wait_until(lambda: (markers / "held").exists() and (markers / "held").read_text(), "the held unit's pid")
    server = open(f"/proc/{{child}}/stat").read().rsplit(")", 1)[1].split()[1]
    found = [open(f"/proc/{{pid}}/environ", "rb").read().decode(errors="replace") for pid in (child, server)]
    print("forked", server != str(os.getpid()))
    print("LEAK" if any("MAINTD_STORE__URL" in e or "PGPASSWORD" in e or {password!r} in e for e in found)
          else "CLEAN")
    print("STILL" if os.environ.get("MAINTD_STORE__URL") and os.environ.get("PGPASSWORD") else "GONE")
    (markers / "release").touch()
    run.join()
""")


def test_a_local_child_process_and_its_fork_server_have_no_state_store_credentials(tmp_path: Path) -> None:
    env = {**os.environ, "MAINTD_STORE__URL": PG_URL, "PGPASSWORD": PG_PASSWORD}
    script = LOCAL_CHILD.format(tests=str(Path(__file__).parents[1]), tmp=str(tmp_path),
                                password=quote(PG_PASSWORD, safe=""))
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "forked True" in done.stdout and "CLEAN" in done.stdout and "STILL" in done.stdout, done.stdout


SPARK_CHILD = textwrap.dedent("""
    import os, sys
    from maintd.settings import Settings
    Settings.model_validate({{"store": {{"url": os.environ["MAINTD_STORE__URL"]}}}})
    from maintd.execution import spark_session
    spark = spark_session(conf={{"spark.master": "local[1]", "spark.ui.enabled": "false"}})
    spark.sparkContext.parallelize([1], 1).map(lambda x: x).collect()  # a Python worker, forked by the JVM
    pids = [p for p in os.listdir("/proc") if p.isdigit()]
    found = []
    for pid in pids:
        try:
            if open(f"/proc/{{pid}}/stat").read().split()[3] not in (str(os.getpid()),):
                continue
            found.append(open(f"/proc/{{pid}}/environ", "rb").read().decode(errors="replace"))
        except OSError:
            pass
    print("children", len(found))
    print("LEAK" if any("MAINTD_STORE__URL" in e or {password!r} in e for e in found) else "CLEAN")
    print("STILL" if os.environ.get("MAINTD_STORE__URL") else "GONE")
    spark.stop()
""")


@pytest.mark.slow
def test_the_driver_jvm_has_no_state_store_credentials(tmp_path: Path) -> None:
    env = {**os.environ, "MAINTD_STORE__URL": PG_URL, "PYSPARK_PYTHON": sys.executable}
    done = subprocess.run([sys.executable, "-c", SPARK_CHILD.format(password=quote(PG_PASSWORD, safe=""))],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "CLEAN" in done.stdout and "STILL" in done.stdout and "children 0" not in done.stdout, done.stdout


def test_the_web_console_hides_every_canary(tmp_path: Path) -> None:
    """The daemon page shows every setting, the table and run pages stored errors: none shows a canary, nor the
    console's own token and password."""
    from maintd.service.console import Console
    from maintd.service.records import RunKind, RunStatus
    from maintd.service.store import StateStore

    token, password = "console-canary-token-0123456789", "console-canary-password"
    configured = settings(tmp_path)
    configured.http.console_token = token
    configured.http.console_password = password
    configured = Settings.model_validate(configured.model_dump())  # validated again: both registered as secrets
    store = StateStore(f"sqlite:///{tmp_path / 'console.db'}")
    try:
        uri = str(tmp_path / "wh" / "orders")  # local: the table page reads the log, which is not there
        run = store.start_run(uri, RunKind.MAINTENANCE)
        store.finish_run(run, RunStatus.FAILED, error=quoting_every_canary() + f" {token} {password}")
        console = Console(store, configured, holder="replica-a")
        auth = f"Bearer {token}"
        pages = [console.respond(path, query, auth) for path, query in (
            ("/daemon", ""), ("/", ""), ("/table", "uri=" + quote(uri, safe="")), ("/run", f"id={run}"))]
        assert [p.status for p in pages] == [200, 200, 200, 200]
        for page in pages:
            text = page.body.decode()
            assert not leaked(text) and token not in text and password not in text
        assert "http.console_token" in pages[0].body.decode() and "***" in pages[0].body.decode()
        assert token not in repr(configured) and password not in repr(configured)
    finally:
        store.close()
