"""The daemon's one SparkSession: started in the background, watched, and stopped safely.

When the driver's JVM dies (OOM-killed, crashed) a PySpark session cannot be repaired in place: every
call fails with ``ConnectionRefusedError`` and PySpark keeps the dead gateway in class attributes. The
daemon therefore does not try to rebuild it. It *fails liveness*: :meth:`SparkDriver.lost` names the
cause, ``/healthz`` answers 503 with it (so Kubernetes restarts the container, with its own back-off
when it keeps happening), the daemon starts no new run (a run would only fail and put its table into
backoff), and runs that were in flight are recorded abandoned, not failed. A SIGTERM in that state
still shuts down cleanly: a dead driver is not stopped again.

The session is started in a thread of its own so that a SIGTERM while the JVM starts (which can take
long, or hang on an unreachable cluster manager) stops the daemon at once; a JVM launched meanwhile
exits by itself with the process (PySpark's gateway ends when its parent's pipe closes).

Spark Connect (``spark.remote``) has no local driver JVM: a server outage makes ``/readyz`` fail, never
``/healthz``, since restarting maintd would not bring the server back.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from loguru import logger

from maintd.errors import ConfigError, SparkDriverLostError
from maintd.service.warm_workers import WarmWorkers, keep_session_warm, keep_warm_interval
from maintd.settings import Settings


class SparkDriver:
    """Holds the daemon's SparkSession (None until started) and knows whether its driver is alive."""

    def __init__(self) -> None:
        self.session: Any = None
        self.warm: WarmWorkers | None = None
        """Keeps a local session's Python workers alive between runs (:mod:`maintd.service.warm_workers`)."""
        self._lost: str | None = None
        self._lock = threading.Lock()

    # -- start ------------------------------------------------------------------------------------------

    def start(self, settings: Settings, stop: threading.Event) -> bool:
        """Start the session in a background thread; returns False if ``stop`` was set first.

        Raises:
            ConfigError: Spark cannot start (the message names the setting to check).
        """
        outcome: dict[str, Any] = {}
        done, abandoned = threading.Event(), threading.Event()

        def _start() -> None:
            try:
                outcome["session"] = start_session(settings)
                if abandoned.is_set():  # the daemon stopped meanwhile (it only matters in a longer-lived process)
                    outcome["session"].stop()
            except BaseException as exc:  # handed to the waiting thread
                outcome["error"] = exc
            finally:
                done.set()

        threading.Thread(target=_start, name="maintd-spark-start", daemon=True).start()
        while not done.wait(0.1):
            if stop.is_set():
                abandoned.set()
                logger.info("stopping while the SparkSession starts; its JVM ends with this process")
                return False
        if "error" in outcome:
            raise outcome["error"]
        self.session = outcome["session"]
        _quiet_accumulator_server(self.session)
        try:
            self.warm = _warm_workers(self.session, settings, self.lost)
        except Exception as exc:  # the session works; only runs after a minute idle start new workers
            logger.warning("cannot keep the Spark workers warm between runs: {}: {}", type(exc).__name__, exc)
        return not stop.is_set()

    # -- health -----------------------------------------------------------------------------------------

    def lost(self) -> str | None:
        """Why the driver is gone, or None while it is alive (or not started yet, or remote)."""
        if self._lost is not None or self.session is None or _is_connect(self.session):
            return self._lost
        reason = _driver_gone(self.session)
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
        """The readiness check: the session exists and answers."""
        if self.session is None:
            return False
        self.alive()
        from maintd.service.jobs import spark_ready

        return spark_ready(self.session)

    # -- stop -------------------------------------------------------------------------------------------

    def stop(self) -> bool:
        """Stop the session unless its driver is gone already; returns False if stopping failed."""
        if self.session is None:
            return True
        if self.warm is not None:
            self.warm.stop()
        if self.lost() is not None:
            logger.info("not stopping the SparkSession: its driver is gone already")
            return True
        try:
            self.session.stop()
        except Exception as exc:  # a driver dying during shutdown must not skip the rest of it
            logger.warning("stopping the SparkSession failed: {}: {}", type(exc).__name__, exc)
            return False
        logger.info("SparkSession stopped")
        return True


def start_session(settings: Settings) -> Any:
    """Create the session from ``settings.spark`` (driver logs as configured) and warm its workers up.

    Raises:
        ConfigError: Spark cannot start.
    """
    from maintd.execution.spark import options_from_settings, spark_session
    from maintd.service.jvm_logging import with_jvm_logging

    where = settings.spark.remote or settings.spark.master
    logger.info("starting the SparkSession ({})", where)
    try:
        spark = spark_session(with_jvm_logging(settings).spark)
    except Exception as exc:  # Py4J and PySpark raise their own types; name the setting to check
        raise ConfigError(
            f"cannot start Spark at {where}: {type(exc).__name__}: {exc}; check spark.master/spark.remote and "
            "that a Java runtime is installed (JAVA_HOME)"
        ) from exc
    try:  # start and prepare the Python workers now, so the first maintenance run does not pay for it
        from maintd.execution.spark import warm_up

        warm_up(spark, options_from_settings(settings.spark))
    except Exception as exc:  # the session works; a failed warm-up only costs the first run its start-up
        logger.warning("Spark workers could not be warmed up: {}", exc)
    return spark


def _warm_workers(spark: Any, settings: Settings, lost: Callable[[], str | None]) -> WarmWorkers | None:
    """Start keeping the session's Python workers warm, if ``spark.keep_workers_warm_seconds`` (or, unset, a
    local master) asks for it; None otherwise."""
    if _is_connect(spark):
        return None
    interval = keep_warm_interval(settings.spark.keep_workers_warm_seconds, spark.sparkContext.master)
    if interval <= 0:
        return None
    from maintd.execution.spark import options_from_settings

    return keep_session_warm(spark, interval, options_from_settings(settings.spark), lost)


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
