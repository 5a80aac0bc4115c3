"""Logging with loguru: readable text on a terminal, JSON lines in Kubernetes, never a password.

Secrets are removed twice, because either layer alone misses something: a *patcher* redacts the
message and the ``extra`` values of every record (so every sink, including ones added later, gets
clean records), and the sink itself redacts the final text, which also covers tracebacks (loguru
formats exceptions inside the sink, after patchers ran) and the JSON serialisation.

Records of the standard :mod:`logging` module (APScheduler, SQLAlchemy, py4j) are forwarded to
loguru so that they get the same format and the same redaction.
"""

from __future__ import annotations

import logging
import sys
from typing import TYPE_CHECKING, Any, TextIO

from loguru import logger

from maintd.settings import LoggingSettings, redact_secrets

if TYPE_CHECKING:
    from loguru import Record

TEXT_FORMAT = (
    "<green>{time:YYYY-MM-DD HH:mm:ss.SSS}</green> | <level>{level: <8}</level> | "
    "<cyan>{name}</cyan>:<cyan>{line}</cyan> - <level>{message}</level>{exception}"
)
#: Loggers of libraries that are chatty at INFO.
_QUIET = {"py4j": logging.WARNING, "apscheduler.executors": logging.WARNING, "sqlalchemy": logging.WARNING}


def redact_record(record: Record) -> None:
    """Loguru patcher: redact passwords from the message and the string ``extra`` values."""
    record["message"] = redact_secrets(record["message"])
    for key, value in record["extra"].items():
        if isinstance(value, str):
            record["extra"][key] = redact_secrets(value)


class _RedactingSink:
    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def write(self, message: str) -> None:
        self.stream.write(redact_secrets(message))
        self.stream.flush()


class InterceptHandler(logging.Handler):
    """Forward standard-library log records to loguru (loguru's documented recipe)."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            level: str | int = logger.level(record.levelname).name
        except ValueError:
            level = record.levelno
        frame, depth = logging.currentframe(), 2
        while frame is not None and frame.f_code.co_filename == logging.__file__:
            frame, depth = frame.f_back, depth + 1  # type: ignore[assignment]
        logger.opt(depth=depth, exception=record.exc_info).log(level, record.getMessage())


def configure_logging(
    settings: LoggingSettings | None = None, *, stream: TextIO | None = None, intercept_stdlib: bool = True
) -> int:
    """Replace loguru's sinks with one sink on ``stream`` (stderr by default); returns its handler id.

    Text with colours when ``stream`` is a terminal, JSON lines (one object per record, loguru's
    ``serialize`` format) when ``settings.json_lines``.
    """
    settings = settings or LoggingSettings()
    stream = stream or sys.stderr
    logger.remove()
    logger.configure(patcher=redact_record)
    options: dict[str, Any] = {"level": settings.level, "backtrace": False, "diagnose": False, "enqueue": False}
    if settings.json_lines:
        handler = logger.add(_RedactingSink(stream).write, serialize=True, **options)
    else:
        colorize = bool(getattr(stream, "isatty", lambda: False)())
        handler = logger.add(_RedactingSink(stream).write, format=TEXT_FORMAT, colorize=colorize, **options)
    if intercept_stdlib:
        logging.basicConfig(handlers=[InterceptHandler()], level=0, force=True)
        for name, level in _QUIET.items():
            logging.getLogger(name).setLevel(level)
    return handler


__all__ = ["TEXT_FORMAT", "InterceptHandler", "configure_logging", "redact_record"]
