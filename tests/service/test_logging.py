"""Logging: text or JSON lines, and never a password."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

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


def test_text_on_a_non_terminal_has_no_colour_codes() -> None:
    out = io.StringIO()
    configure_logging(LoggingSettings(), stream=out)
    logger.info("plain")
    assert "\x1b[" not in out.getvalue()
