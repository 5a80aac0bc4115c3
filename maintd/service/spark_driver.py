"""The daemon's SparkSession: started when a plan first needs it, watched, stopped when idle, and stopped safely.

**Started on demand.** A daemon whose plans all run in process never starts a JVM: the first run that needs
Spark builds the session (:meth:`SparkDriver.session_for_run`), and ``/readyz`` does not wait for one. A start
that fails (no Java, an unreachable cluster manager) fails that run with :class:`~maintd.errors.ConfigError`
naming the setting to check and makes ``/readyz`` answer 503; the next run that needs Spark tries again. The
session starts in a thread of its own, so a SIGTERM meanwhile stops the daemon at once.

**Stopped when idle.** A session whose driver JVM this process launched is stopped once no run has used it for
``spark.idle_stop_seconds``: PySpark stops only the context, so :func:`stop_jvm` also closes the gateway and its
JVM, whose memory and Python workers go back to the machine.

**Lost.** A PySpark session whose driver JVM died cannot be repaired in place, so the daemon *fails liveness*:
:meth:`SparkDriver.lost` names the cause, ``/healthz`` answers 503 (Kubernetes restarts the container), no new
run starts, and runs in flight are recorded abandoned, not failed. A SIGTERM then still shuts down cleanly.

Spark Connect (``spark.remote``) has no local driver JVM: a server outage fails ``/readyz``, never
``/healthz``, and the session is never stopped for idleness.

docs/architecture.md ("Spark modes") gives the reasons.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from loguru import logger

from maintd.errors import ConfigError, SparkDriverLostError
from maintd.settings import Settings


class SparkDriver:
    """Holds the daemon's SparkSession (None until a run needs it, and again once stopped for idleness) and knows
    whether its driver is alive."""

    def __init__(self, settings: Settings, stop: threading.Event | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.settings = settings
        self.session: Any = None
        self.starts = 0
        """Sessions started so far (a session stopped for idleness and started again counts twice)."""
        self._stop = stop or threading.Event()
        self._clock = clock
        self._lost: str | None = None
        self._start_error: str | None = None
        self._lock = threading.Lock()
        self._use = threading.Condition()
        self._users = 0
        self._idle_since = clock()
        self._watcher: threading.Thread | None = None

    # -- use --------------------------------------------------------------------------------------------

    @contextmanager
    def session_for_run(self) -> Iterator[Any]:
        """The session for one run that needs Spark, started first if none runs; never stopped for idleness
        while a run holds it.

        Raises:
            ConfigError: Spark cannot start (the message names the setting to check).
            SparkDriverLostError: the driver is gone, or the daemon stopped while the session started.
        """
        with self._use:
            self.alive()
            if self.session is None:
                self._start()
            self._users += 1
            session = self.session
        try:
            yield session
        finally:
            with self._use:
                self._users -= 1
                self._idle_since = self._clock()

    def _start(self) -> None:
        """Start the session in a background thread and wait for it (the caller holds ``_use``)."""
        outcome: dict[str, Any] = {}
        done, abandoned = threading.Event(), threading.Event()

        def _run() -> None:
            try:
                outcome["session"] = start_session(self.settings)
                if abandoned.is_set():  # the daemon stopped meanwhile (it only matters in a longer-lived process)
                    stop_jvm(outcome["session"])
            except BaseException as exc:  # handed to the waiting thread
                outcome["error"] = exc
            finally:
                done.set()

        threading.Thread(target=_run, name="maintd-spark-start", daemon=True).start()
        while not done.wait(0.1):
            if self._stop.is_set():
                abandoned.set()
                logger.info("stopping while the SparkSession starts; its JVM ends with this process")
                raise SparkDriverLostError("the daemon stopped while the SparkSession started")
        if "error" in outcome:
            self._start_error = str(outcome["error"])
            raise outcome["error"]
        self._start_error = None
        self.session = outcome["session"]
        self.starts += 1
        self._lost = None
        _quiet_accumulator_server(self.session)

    # -- idleness ---------------------------------------------------------------------------------------

    def idle_seconds(self) -> float:
        """``spark.idle_stop_seconds``: 0 never stops the session for idleness."""
        return float(self.settings.spark.idle_stop_seconds)

    def watch_idleness(self) -> None:
        """Start the thread that stops the session once it has been idle for :meth:`idle_seconds`."""
        if self.idle_seconds() <= 0 or self._watcher is not None:
            return
        self._watcher = threading.Thread(target=self._watch, name="maintd-spark-idle", daemon=True)
        self._watcher.start()

    def _watch(self) -> None:
        period = max(0.2, min(10.0, self.idle_seconds() / 10))
        while not self._stop.wait(period):
            try:
                self.stop_if_idle()
            except Exception as exc:  # the next look tries again; the session is left as it is
                logger.warning("stopping the idle SparkSession failed: {}: {}", type(exc).__name__, exc)

    def stop_if_idle(self) -> bool:
        """Stop the session if no run has used it for :meth:`idle_seconds` and its JVM is this process's own;
        returns whether it was stopped."""
        with self._use:
            idle = self._clock() - self._idle_since
            if (self.session is None or self._users or idle < self.idle_seconds() or self.lost() is not None
                    or not launched_here(self.session)):
                return False
            logger.info("stopping the SparkSession: no run has needed it for {:.0f} s (spark.idle_stop_seconds); "
                        "the next run that needs Spark starts a new one", idle)
            session, self.session = self.session, None
            stop_jvm(session)
            return True

    # -- health -----------------------------------------------------------------------------------------

    def lost(self) -> str | None:
        """Why the driver is gone, or None while it is alive (or not started, or remote)."""
        session = self.session
        if self._lost is not None or session is None or _is_connect(session):
            return self._lost
        reason = _driver_gone(session)
        if reason is not None:
            with self._lock:
                if self._lost is None:
                    self._lost = reason
                    logger.error(
                        "{}; /healthz now fails so that the container is restarted, and no new run starts", reason
                    )
        return self._lost

    def alive(self) -> bool:
        """The liveness check: raises :class:`SparkDriverLostError` once the driver is gone."""
        reason = self.lost()
        if reason is not None:
            raise SparkDriverLostError(reason)
        return True

    def ready(self) -> bool:
        """The readiness check: no session is needed yet, or the session answers; fails while the last start
        failed (the next run that needs Spark tries again)."""
        if self._start_error is not None:
            raise ConfigError(self._start_error)
        session = self.session
        if session is None:
            return True
        self.alive()
        from maintd.service.jobs import spark_ready

        return spark_ready(session)

    # -- stop -------------------------------------------------------------------------------------------

    def stop(self) -> bool:
        """Stop the session unless its driver is gone already; returns False if stopping failed."""
        self._stop.set()
        if self._watcher is not None:
            self._watcher.join(10)
        if self.session is None:
            return True
        if self.lost() is not None:
            logger.info("not stopping the SparkSession: its driver is gone already")
            return True
        try:
            stop_jvm(self.session)
        except Exception as exc:  # a driver dying during shutdown must not skip the rest of it
            logger.warning("stopping the SparkSession failed: {}: {}", type(exc).__name__, exc)
            return False
        self.session = None
        logger.info("SparkSession stopped")
        return True


def start_session(settings: Settings) -> Any:
    """Create the session from ``settings.spark`` (driver logs as configured).

    Raises:
        ConfigError: Spark cannot start.
    """
    from maintd.execution.spark import spark_session
    from maintd.service.jvm_logging import with_jvm_logging

    where = settings.spark.remote or settings.spark.master
    logger.info("starting the SparkSession ({})", where)
    try:
        return spark_session(with_jvm_logging(settings).spark)
    except Exception as exc:  # Py4J and PySpark raise their own types; name the setting to check
        raise ConfigError(
            f"cannot start Spark at {where}: {type(exc).__name__}: {exc}; check spark.master/spark.remote and "
            "that a Java runtime is installed (JAVA_HOME)"
        ) from exc


def launched_here(spark: Any) -> bool:
    """Whether ``spark`` is a classic session whose driver JVM this process launched (not Spark Connect, not
    ``spark-submit``'s JVM, which launched this process)."""
    if _is_connect(spark):
        return False
    return getattr(getattr(spark.sparkContext, "_gateway", None), "proc", None) is not None


def stop_jvm(spark: Any, timeout: float = 30.0) -> None:
    """Stop ``spark`` and, when this process launched its JVM, that JVM too, so that its memory is returned and a
    later session starts a new one.

    ``SparkSession.stop`` stops the context but leaves the JVM running, with its gateway kept in
    ``SparkContext._gateway`` for the next context. The JVM exits when its stdin closes (PySpark's gateway server
    waits on it); PySpark launches a new one when ``_gateway`` is None.
    """
    if _is_connect(spark) or not launched_here(spark):
        spark.stop()
        return
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    spark.stop()
    if gateway is None:
        return
    process = gateway.proc
    try:
        gateway.shutdown()
    finally:
        if process.stdin is not None:
            process.stdin.close()
        try:
            process.wait(timeout)
        except Exception:  # it did not exit in time: it holds nothing this process needs any more
            process.kill()
            process.wait()
        with SparkContext._lock:
            SparkContext._gateway = None
            SparkContext._jvm = None


def _driver_gone(spark: Any) -> str | None:
    """Why the classic session's driver JVM is gone, or None if it still runs."""
    context = spark.sparkContext
    process = getattr(getattr(context, "_gateway", None), "proc", None)
    if process is not None:  # PySpark launched the JVM: its exit code says it all, without a round trip
        code = process.poll()
        return None if code is None else f"the Spark driver JVM (pid {process.pid}) exited with code {code}"
    try:  # the JVM launched this process (spark-submit): ask it
        context._jvm.java.lang.System.currentTimeMillis()
    except Exception as exc:  # Py4JNetworkError, ConnectionRefusedError...
        return f"the Spark driver JVM does not answer ({type(exc).__name__}: {exc})"
    return None


def _quiet_accumulator_server(spark: Any) -> None:
    """PySpark's accumulator server (a socketserver the JVM connects to) prints a bare ``EOFError``
    traceback on stderr when the JVM dies; :meth:`SparkDriver.lost` reports the loss instead, in one line."""
    server = getattr(getattr(spark, "sparkContext", None), "_accumulatorServer", None)
    if server is not None and not _is_connect(spark):

        def handle_error(_request: Any, _address: Any) -> None:
            logger.debug("the Spark driver JVM closed its accumulator connection")

        server.handle_error = handle_error


def _is_connect(spark: Any) -> bool:
    return type(spark).__module__.startswith("pyspark.sql.connect")


__all__ = ["SparkDriver", "start_session"]
