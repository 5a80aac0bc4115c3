"""Logging with loguru: readable text on a terminal, JSON lines in Kubernetes, never a password.

Secrets are removed twice, because either layer alone misses something. A *patcher* redacts the message and
the ``extra`` values of every record (so every sink, even one added later, gets clean records), and the sink
redacts the final text, which also covers tracebacks (formatted after patchers ran) and the JSON
serialisation. Records of the standard :mod:`logging` module (APScheduler, SQLAlchemy, py4j) are forwarded to
loguru for the same format and redaction.

Every command configures logging this way (the daemon and ``maintd run`` from the ``logging`` settings, the
others at WARNING). loguru's ``diagnose`` mode, which prints local variables (database URLs among them) in
tracebacks, is off everywhere, and ``LOGURU_DIAGNOSE=NO`` is set for child processes. A
:class:`~maintd.errors.MaintdError` is logged without its traceback; unexpected errors keep theirs.

The daemon and ``maintd run`` also own the process's standard error (``own_stderr``): fd 2 becomes a pipe
read by a thread, which redacts every line and, in JSON mode, passes JSON lines through and wraps every other
line in a JSON record (level WARNING, ``extra.source = "stderr"``). So whatever a child process writes there
(the Spark driver's JVM and its Python workers, :mod:`maintd.service.jvm_logging`) reaches the log collector
redacted. maintd's own records bypass the pipe, so none is lost when the process exits.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import sys
import threading
from typing import TYPE_CHECKING, Any, TextIO

from loguru import logger

from maintd.errors import MaintdError
from maintd.redaction import redact_secrets

if TYPE_CHECKING:
    from loguru import Record

    from maintd.settings import LoggingSettings

TEXT_FORMAT = (
    "<green>{time:YYYY-MM-DD HH:mm:ss.SSS}</green> | <level>{level: <8}</level> | "
    "<cyan>{name}</cyan>:<cyan>{line}</cyan> - <level>{message}</level>{exception}"
)
_QUIET = {"py4j": logging.WARNING, "apscheduler.executors": logging.WARNING, "sqlalchemy": logging.WARNING,
          "alembic": logging.WARNING}
"""Loggers of libraries that are chatty at INFO, lines that say nothing to an operator (Alembic's "Context impl
SQLiteImpl." and its plugins on every command that opens a store): maintd logs what they did in its own words."""


def redact_record(record: Record) -> None:
    """Loguru patcher: redact passwords from the message and the string ``extra`` values, and drop the
    traceback of an expected error (a :class:`~maintd.errors.MaintdError`: its message says it all)."""
    record["message"] = redact_secrets(record["message"])
    exception = record["exception"]
    if exception is not None and isinstance(exception.value, MaintdError):
        record["exception"] = None
    for key, value in record["extra"].items():
        if isinstance(value, str):
            record["extra"][key] = redact_secrets(value)


class _RedactingSink:
    """Writes redacted text to ``stream``, or to whatever ``sys.stderr`` is at the time of each write."""

    def __init__(self, stream: TextIO | None) -> None:
        self.stream = stream

    def write(self, message: str) -> None:
        stream = self.stream or sys.stderr
        stream.write(redact_secrets(message))
        stream.flush()


_PY4J_FILES = f"{os.sep}py4j{os.sep}"
"""Part of the path of py4j's modules: py4j logs a retried command through the root logger, not its own."""


class InterceptHandler(logging.Handler):
    """Forward standard-library log records to loguru (loguru's documented recipe).

    py4j logs each command it sends again ("Exception while sending command.", with a traceback) at INFO
    through the root logger (``logging.info``), out of reach of its own logger's level in :data:`_QUIET`: such a
    record is dropped under that level, as py4j's other chatter is. Its ERROR, when the command fails for good,
    still shows. A JVM that went away (a killed driver) would otherwise print a traceback at every stop.
    """

    def emit(self, record: logging.LogRecord) -> None:
        if record.name == "root" and record.levelno < _QUIET["py4j"] and _PY4J_FILES in record.pathname:
            return
        try:
            level: str | int = logger.level(record.levelname).name
        except ValueError:
            level = record.levelno
        frame, depth = logging.currentframe(), 2
        while frame is not None and frame.f_code.co_filename == logging.__file__:
            frame, depth = frame.f_back, depth + 1  # type: ignore[assignment]
        logger.opt(depth=depth, exception=record.exc_info).log(level, record.getMessage())


def configure_logging(
    settings: LoggingSettings | None = None,
    *,
    stream: TextIO | None = None,
    intercept_stdlib: bool = True,
    level: str | None = None,
    own_stderr: bool = False,
) -> int:
    """Replace loguru's sinks with one sink on ``stream`` (default: ``sys.stderr`` as it is at each write);
    returns its handler id.

    Text with colours when ``stream`` is a terminal, JSON lines (one object per record, loguru's
    ``serialize`` format) when ``settings.json_lines``. ``level`` overrides ``settings.level``; without
    settings it defaults to INFO, text. ``own_stderr`` (no ``stream``): see the module docstring.
    """
    json_lines = bool(settings and settings.json_lines)
    chosen = level or (settings.level if settings else "INFO")
    os.environ["LOGURU_DIAGNOSE"] = "NO"  # for processes started from this one (Spark's Python workers)
    logger.remove()
    logger.configure(patcher=redact_record)
    options: dict[str, Any] = {"level": chosen, "backtrace": False, "diagnose": False, "enqueue": False}
    if own_stderr and stream is None:  # the driver JVM writes to fd 2 too: its lines are redacted on the way
        global _forward_json
        _forward_json = json_lines
        stream = _forward_stderr()
    if json_lines:
        handler = logger.add(_RedactingSink(stream).write, serialize=True, **options)
    else:
        colorize = bool(getattr(stream or sys.stderr, "isatty", lambda: False)())
        handler = logger.add(_RedactingSink(stream).write, format=TEXT_FORMAT, colorize=colorize, **options)
    if intercept_stdlib:
        # Forward what loguru would write anyway: formatting py4j's DEBUG chatter only to drop it costs time.
        logging.basicConfig(handlers=[InterceptHandler()], level=logger.level(chosen).no, force=True)
        for name, quiet in _QUIET.items():
            logging.getLogger(name).setLevel(quiet)
    return handler


_forwarded: TextIO | None = None
_forward_json = True
"""Whether lines forwarded from fd 2 that are not JSON become JSON records (else they are written as they came)."""


_pipe: tuple[int, int] | None = None
"""(device, inode) of the pipe fd 2 was made into, to tell whether fd 2 is still it."""


def _forward_stderr() -> TextIO:
    """Make fd 2 a pipe whose lines are redacted and written out (once per process, again if something else
    took fd 2 since: a test harness's capture); returns the real stderr."""
    global _forwarded, _pipe
    if _forwarded is not None and _pipe is not None:
        try:
            st = os.fstat(2)
            if (st.st_dev, st.st_ino) == _pipe:
                return _forwarded
        except OSError:
            pass
    sys.stderr.flush()
    real = os.fdopen(os.dup(2), "w", buffering=1, encoding="utf-8", errors="replace")
    read_end, write_end = os.pipe()
    os.dup2(write_end, 2)
    os.close(write_end)
    st = os.fstat(2)
    _pipe = (st.st_dev, st.st_ino)
    threading.Thread(target=_pass_lines, args=(read_end, real), name="maintd-stderr", daemon=True).start()
    if _forwarded is None:
        atexit.register(_drain)
    _forwarded = real
    return real


_SENTINEL = "\x00maintd-stderr-drained\x00"
"""A line :func:`_drain` writes through the pipe; the forwarding thread sets :data:`_drained` on reading it."""
_drained = threading.Event()


def _drain(timeout: float = 2.0) -> None:
    """At exit, wait until the lines written to fd 2 so far are forwarded: the last thing a command writes
    (``error: ...`` before it exits) goes through the pipe, and the thread forwarding it is a daemon thread
    that would be stopped with lines still in the pipe. A sentinel line marks the end (a child still holding
    the pipe would keep an end-of-file from coming); bounded by ``timeout``."""
    if _pipe is None:
        return
    try:
        sys.stderr.flush()
        st = os.fstat(2)
        if (st.st_dev, st.st_ino) != _pipe:
            return
        _drained.clear()
        os.write(2, (_SENTINEL + "\n").encode())
    except (OSError, ValueError):
        return
    _drained.wait(timeout)


def _pass_lines(read_end: int, real: TextIO) -> None:
    with os.fdopen(read_end, encoding="utf-8", errors="replace") as lines:
        for line in lines:
            if line.rstrip("\n") == _SENTINEL:
                real.flush()
                _drained.set()
                continue
            try:
                _pass_line(line, real)
            except Exception:  # never stop reading: a full pipe would block every writer
                real.write(line)


def _pass_line(line: str, real: TextIO) -> None:
    text = line.rstrip("\n")
    if not text.strip():
        return
    if not _forward_json:
        real.write(redact_secrets(text) + "\n")
        return
    if text.lstrip().startswith("{"):
        try:
            json.loads(text)
        except ValueError:
            pass
        else:
            real.write(redact_secrets(text) + "\n")
            return
    logger.bind(source="stderr").warning("{}", text)


__all__ = ["TEXT_FORMAT", "InterceptHandler", "configure_logging", "redact_record"]
