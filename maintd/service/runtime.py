"""``maintd daemon`` put together: store, HTTP endpoint, SparkSession, daemon loop, signals, shutdown.

Start order is chosen for Kubernetes probes: signal handlers first (a SIGTERM during start-up still
ends in a clean exit 0), then the HTTP endpoint (``/healthz`` answers while the JVM starts, ``/readyz``
says 503 until the state store and Spark both answer), then the one long-lived SparkSession, then the
scheduler. Shutdown runs in reverse: the daemon drains (see :meth:`Daemon.stop`), then Spark stops,
which also cancels the jobs of runs abandoned after the grace period, then the endpoint closes.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

from loguru import logger

from maintd.errors import ConfigError
from maintd.service.daemon import Daemon, default_holder
from maintd.service.http import HealthServer
from maintd.service.jobs import TableJobs, spark_ready
from maintd.service.metrics import Metrics
from maintd.service.store import StateStore
from maintd.settings import Settings, redact_url


def serve(settings: Settings, *, stop: threading.Event | None = None, holder: str | None = None) -> int:
    """Run the daemon until SIGTERM or SIGINT (or until ``stop`` is set); returns the exit code, 0.

    Raises:
        ConfigError: the policy file is invalid, or Spark cannot start.
        StateStoreError: the state store cannot be opened.
    """
    from maintd.planner.policy_files import load_policy_file

    stop = stop or threading.Event()
    holder = holder or default_holder()
    with _signals_set(stop):
        load_policy_file(settings.policy.path)  # a broken policy file fails the start, not every run
        store = StateStore(
            settings.store.url,
            db_schema=settings.store.db_schema,
            connect_timeout=settings.store.connect_timeout_seconds,
        )
        logger.info("state store {} ({})", redact_url(settings.store.url), store.dialect)
        metrics = Metrics()
        spark: list[Any] = []
        checks = {"state_store": store.ping, "spark": lambda: bool(spark) and spark_ready(spark[0])}
        server: HealthServer | None = None
        try:
            server = _http_server(settings, metrics, checks)
            if stop.is_set():
                return 0
            spark.append(_start_spark(settings))
            jobs = TableJobs(settings, store, metrics, holder=holder, spark=spark[0])
            daemon = Daemon(
                settings, store, jobs.maintain, jobs.reclaim, discover=jobs.discover, metrics=metrics, holder=holder
            )
            if not stop.is_set():
                daemon.start()
                stop.wait()
                daemon.stop()
        finally:
            if spark:
                spark[0].stop()
            if server is not None:
                server.stop()
            store.close()
    logger.info("maintd daemon exited")
    return 0


def _http_server(settings: Settings, metrics: Metrics, checks: dict[str, Any]) -> HealthServer | None:
    if not settings.http.enabled:
        return None
    try:
        server = HealthServer(metrics, checks, host=settings.http.host, port=settings.http.port)
    except OSError as exc:
        raise ConfigError(
            f"cannot listen on {settings.http.host}:{settings.http.port}: {exc.strerror or exc}; "
            "free the port or change http.port"
        ) from None
    return server.start()


def _start_spark(settings: Settings) -> Any:
    from maintd.execution.spark import options_from_settings, spark_session, warm_up

    where = settings.spark.remote or settings.spark.master
    logger.info("starting the SparkSession ({})", where)
    try:
        spark = spark_session(settings.spark)
    except Exception as exc:  # Py4J and PySpark raise their own types; name the setting to check
        raise ConfigError(
            f"cannot start Spark at {where}: {type(exc).__name__}: {exc}; check spark.master/spark.remote and "
            "that a Java runtime is installed (JAVA_HOME)"
        ) from exc
    try:  # start and prepare the Python workers now, so the first maintenance run does not pay for it
        warm_up(spark, options_from_settings(settings.spark))
    except Exception as exc:  # the session works; a failed warm-up only costs the first run its start-up
        logger.warning("Spark workers could not be warmed up: {}", exc)
    return spark


@contextmanager
def _signals_set(stop: threading.Event) -> Iterator[None]:
    """SIGTERM and SIGINT set ``stop`` instead of killing the process (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def _on_signal(signum: int, _frame: FrameType | None) -> None:
        logger.info("received {}; stopping", signal.Signals(signum).name)
        stop.set()

    previous = {sig: signal.signal(sig, _on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


__all__ = ["serve"]
