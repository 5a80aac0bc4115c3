"""Logging: text or JSON lines, and never a password."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from loguru import logger

from maintd.service.logging import configure_logging
from maintd.settings import LoggingSettings

SECRET_URL = "postgresql+psycopg://maintd:hunter2@db:5432/maintd"


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    yield
    logger.remove()
    logger.configure(patcher=None)
    logging.basicConfig(handlers=[], force=True)


def test_text_logs_hide_passwords_in_urls() -> None:
    out = io.StringIO()
    configure_logging(LoggingSettings(level="INFO"), stream=out)
    logger.info("connecting to {}", SECRET_URL)
    text = out.getvalue()
    assert "hunter2" not in text
    assert "postgresql+psycopg://maintd:***@db:5432/maintd" in text
    assert "| INFO     |" in text


def test_json_lines_hold_one_redacted_object_per_record() -> None:
    out = io.StringIO()
    configure_logging(LoggingSettings(json=True), stream=out)
    logger.bind(url=SECRET_URL).warning("store unreachable: {}", SECRET_URL)
    logger.info("second")
    lines = out.getvalue().splitlines()
    assert len(lines) == 2
    record = json.loads(lines[0])["record"]
    assert record["level"]["name"] == "WARNING"
    assert record["message"] == "store unreachable: postgresql+psycopg://maintd:***@db:5432/maintd"
    assert record["extra"]["url"] == "postgresql+psycopg://maintd:***@db:5432/maintd"
    assert "hunter2" not in out.getvalue()


def test_tracebacks_are_redacted_too() -> None:
    out = io.StringIO()
    configure_logging(LoggingSettings(), stream=out)
    try:
        raise RuntimeError(f"cannot connect to {SECRET_URL}")
    except RuntimeError:
        logger.exception("run failed")
    assert "RuntimeError: cannot connect to postgresql+psycopg://maintd:***@db" in out.getvalue()
    assert "hunter2" not in out.getvalue()


def test_records_below_the_level_are_dropped() -> None:
    out = io.StringIO()
    configure_logging(LoggingSettings(level="warning"), stream=out)
    logger.info("hidden")
    logger.warning("shown")
    assert "hidden" not in out.getvalue()
    assert "shown" in out.getvalue()


def test_standard_library_records_go_through_loguru_and_are_redacted() -> None:
    out = io.StringIO()
    configure_logging(LoggingSettings(), stream=out)
    logging.getLogger("apscheduler.scheduler").info("job store at %s", SECRET_URL)
    assert "job store at postgresql+psycopg://maintd:***@db" in out.getvalue()


def test_opening_a_new_store_logs_no_alembic_lines_only_maintds_own(tmp_path: Path) -> None:
    from maintd.service.store import StateStore

    out = io.StringIO()
    configure_logging(LoggingSettings(level="INFO"), stream=out)
    StateStore(f"sqlite:///{tmp_path / 'maintd.db'}").close()  # creates the schema through Alembic
    text = out.getvalue()
    assert "alembic" not in text.lower() and "Context impl" not in text, text
    assert "schema created at revision" in text


def test_text_on_a_non_terminal_has_no_colour_codes() -> None:
    out = io.StringIO()
    configure_logging(LoggingSettings(), stream=out)
    logger.info("plain")
    assert "\x1b[" not in out.getvalue()


def test_an_expected_error_is_one_line_and_an_unexpected_one_keeps_its_traceback() -> None:
    from maintd.errors import TableNotFoundError

    out = io.StringIO()
    configure_logging(LoggingSettings(), stream=out)
    try:
        raise TableNotFoundError("no table at /wh/x (no /wh/x/_log/); create it first")
    except TableNotFoundError as exc:
        logger.opt(exception=exc).error("table /wh/x: maintenance failed: {}", exc)
    assert out.getvalue().count("\n") == 1 and "Traceback" not in out.getvalue()
    try:
        raise KeyError("bug")
    except KeyError as exc:
        logger.opt(exception=exc).error("unexpected")
    assert "Traceback" in out.getvalue()


def test_no_command_shows_the_values_of_variables_in_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from maintd.cli import main

    with pytest.raises(SystemExit):
        main(["table", "describe", str(tmp_path / "none")])  # any command configures logging first

    def connect() -> None:
        password = "hunter2-in-a-local-variable"
        raise RuntimeError(f"cannot connect ({len(password)} characters)")

    capsys.readouterr()
    try:
        connect()
    except RuntimeError:
        logger.exception("failed")
    err = capsys.readouterr().err
    assert "RuntimeError: cannot connect" in err, "the traceback is there"
    assert "hunter2" not in err and "└" not in err, "but not the values of its variables (loguru's diagnose)"


def test_a_run_logs_one_summary_line_with_its_figures_and_binds_table_and_run_id() -> None:
    from maintd.service.run_log import log_run, run_context

    out = io.StringIO()
    configure_logging(LoggingSettings(json=True), stream=out)
    metrics = {"tasks_planned": 3, "tasks_committed": 3, "files_before": 20, "files": 4, "bytes_before": 5000,
               "bytes": 3000}
    with run_context("/wh/orders", 17, "maintenance"):
        logger.info("committing")
        log_run("maintenance", "/wh/orders", 17, "succeeded", 2.5, metrics)
    inner, summary = (json.loads(line)["record"] for line in out.getvalue().splitlines())
    assert inner["extra"] == {"table": "/wh/orders", "run_id": 17, "kind": "maintenance"}
    assert summary["level"]["name"] == "INFO"
    assert summary["message"] == (
        "maintenance of /wh/orders (run 17) succeeded in 2.5 s: 3/3 task(s), 20 -> 4 file(s), 4.9 KiB -> 2.9 KiB"
    )
    assert {k: summary["extra"][k] for k in ("table", "run_id", "tasks_planned", "tasks_committed", "files_before",
                                             "files_after", "bytes_before", "bytes_after", "seconds", "status")} == {
        "table": "/wh/orders", "run_id": 17, "tasks_planned": 3, "tasks_committed": 3, "files_before": 20,
        "files_after": 4, "bytes_before": 5000, "bytes_after": 3000, "seconds": 2.5, "status": "succeeded"}


def test_in_json_mode_lines_written_to_stderr_by_child_processes_become_json(tmp_path: Path) -> None:
    import subprocess
    import sys

    child = tmp_path / "child.py"
    child.write_text("import sys\nsys.stderr.write('WARNING: Using incubator modules\\n{\"jvm\": 1}\\n')\n")
    script = (
        "import subprocess, sys\n"
        "from loguru import logger\n"
        "from maintd.service.logging import configure_logging\n"
        "from maintd.settings import LoggingSettings\n"
        "configure_logging(LoggingSettings(json=True), own_stderr=True)\n"
        "logger.info('own record')\n"
        f"subprocess.run([sys.executable, {str(child)!r}])\n"  # at exit, every line is forwarded first
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True)
    records = [json.loads(line) for line in result.stderr.splitlines()]
    assert records[0]["record"]["message"] == "own record"
    wrapped = [r for r in records if "record" in r and r["record"]["extra"].get("source") == "stderr"]
    assert [r["record"]["message"] for r in wrapped] == ["WARNING: Using incubator modules"]
    assert {"jvm": 1} in records, "JSON lines pass through as they are"


def test_py4j_retrying_a_command_through_the_root_logger_logs_nothing_but_its_final_failure() -> None:
    """py4j logs a command it sends again at INFO through the root logger, with a traceback: after a driver JVM
    was killed, that printed a traceback at the daemon's stop. Only its ERROR, the command failing for good,
    is shown."""
    from py4j import protocol
    from py4j.java_gateway import GatewayClient
    from py4j.protocol import Py4JNetworkError

    class Gone:
        def send_command(self, command: str) -> str:
            raise Py4JNetworkError("Answer from Java side is empty", when=protocol.EMPTY_RESPONSE)

        def close(self, reset: bool = False) -> None:
            pass

    out = io.StringIO()
    configure_logging(LoggingSettings(), stream=out)
    client = GatewayClient.__new__(GatewayClient)
    client._get_connection = Gone  # type: ignore[method-assign]
    client._should_retry = lambda retry, connection, pne=None: retry  # type: ignore[method-assign]
    assert client.send_command("c\nt\nx\ne\n") == protocol.ERROR
    text = out.getvalue()
    assert text.count("Exception while sending command.") == 1, text
    assert "| ERROR    |" in text and "| INFO     |" not in text
    logging.getLogger().info("maintd's own stdlib records at INFO still show")
    assert "maintd's own stdlib records at INFO still show" in out.getvalue()
