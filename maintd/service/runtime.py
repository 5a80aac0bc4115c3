"""``maintd daemon`` put together: store, HTTP endpoint, SparkSession, daemon loop, signals, shutdown.

Start order is chosen for Kubernetes probes. Signal handlers come first, so a SIGTERM during start-up still
ends in a clean exit 0; then the fork server that runs small plans in child processes (before any thread
reads the environment, see :mod:`maintd.execution.local`). Then the state store (its schema upgraded); then
the HTTP endpoint (``/readyz`` says 503 until the state store answers); then the scheduler. No JVM starts
with the daemon: the SparkSession is started by the first plan that needs Spark and stopped when idle
(:mod:`maintd.service.spark_driver`). Shutdown runs in reverse, every step even if one before it failed: the
daemon drains (see :meth:`Daemon.stop`); Spark stops if it runs (not when its driver is gone already), which
also cancels the jobs of runs abandoned after the grace period; then the endpoint closes, then the store.

When the Spark driver's JVM dies, ``/healthz`` fails so that Kubernetes restarts the container (see
:mod:`maintd.service.spark_driver`).
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

from loguru import logger

from maintd.errors import ConfigError
from maintd.service.budget import budget_of, release
from maintd.service.console import Console
from maintd.service.daemon import Daemon, default_holder
from maintd.service.http import HealthServer
from maintd.service.jobs import TableJobs
from maintd.service.metrics import Metrics
from maintd.service.spark_driver import SparkDriver
from maintd.service.store import StateStore, open_store
from maintd.service.tuning import TargetKeeper
from maintd.settings import Settings, apply_storage_settings, redact_url


def serve(settings: Settings, *, stop: threading.Event | None = None, holder: str | None = None) -> int:
    """Run the daemon until SIGTERM or SIGINT (or until ``stop`` is set); returns the exit code.

    0 after a clean stop, from every state (starting, running, Spark driver lost); 1 when a step of the
    shutdown failed (it is logged, and the other steps still run).

    Raises:
        ConfigError: the policy file is invalid, the port is taken, or Spark cannot start.
        StateStoreError: the state store cannot be opened (or its schema is older and not upgraded).
    """
    from maintd.planner.policy_files import load_policy_file

    stop = stop or threading.Event()
    holder = holder or default_holder()
    with _signals_set(stop):
        load_policy_file(settings.policy.path)  # a broken policy file fails the start, not every run
        apply_storage_settings(settings)  # object-store options of the warehouse, their secrets redacted
        _start_fork_server(settings)
        store = open_store(settings, upgrade=settings.store.migrate_on_start)
        logger.info("state store {} ({})", redact_url(settings.store.url), store.dialect)
        driver = SparkDriver(settings, stop)
        metrics = Metrics()
        budget = budget_of(settings)
        server: HealthServer | None = None
        daemon: Daemon | None = None
        try:
            jobs: TableJobs | None = None

            def warehouse() -> bool:
                return jobs is None or jobs.warehouse_ready()

            server = _http_server(
                settings, metrics, {"state_store": store.ping, "spark": driver.ready, "warehouse": warehouse},
                {"spark_driver": driver.alive},
            )
            if server is not None:  # the fleet is readable from the start
                _attach_console(server, settings, store, holder)
            if not stop.is_set():
                driver.watch_idleness()
                jobs = TableJobs(settings, store, metrics, holder=holder, session=driver.session_for_run,
                                 budget=budget)
                keeper = TargetKeeper(settings, store, jobs.runner.policy_file)
                daemon = Daemon(
                    settings, store, jobs.maintain, jobs.reclaim, discover=jobs.discover, metrics=metrics,
                    holder=holder, blocked=driver.lost, check=jobs.check, budget=budget,
                    keep=lambda owned: keeper.keep(owned, jobs.targets_seen()), targets=jobs.targets_seen,
                )
                daemon.start()
                if server is not None and settings.http.console_served():
                    server.console = Console(store, settings, holder=holder, work=daemon.work)
                stop.wait()
        finally:
            clean = _shut_down(daemon, driver, server, store)
            release(budget)
    logger.info("maintd daemon exited{}", "" if clean else " (a shutdown step failed, see above)")
    return 0 if clean else 1


def _shut_down(daemon: Daemon | None, driver: SparkDriver, server: HealthServer | None, store: StateStore) -> bool:
    """Every shutdown step, each even when an earlier one failed; returns whether all succeeded."""
    steps: list[tuple[str, Callable[[], object]]] = []
    if daemon is not None:
        steps.append(("stop the daemon loop", daemon.stop))
    steps.append(("stop Spark", driver.stop))
    steps.append(("end the idle processes of plans run in process", _end_lanes))
    if server is not None:
        steps.append(("close the HTTP endpoint", server.stop))
    steps.append(("close the state store", store.close))
    clean = True
    for what, step in steps:
        try:
            if step() is False:
                clean = False
        except Exception as exc:  # log it and go on: a later step must not be skipped
            logger.error("cannot {}: {}: {}", what, type(exc).__name__, exc)
            clean = False
    logger.info("state store closed")
    return clean


def _end_lanes() -> None:
    if "maintd.execution.local" in sys.modules:  # no plan ran in process: nothing to end, nothing to import
        from maintd.execution.local import end_lanes

        end_lanes()


def _start_fork_server(settings: Settings) -> None:
    """Start the fork server of the child processes that run small plans (:mod:`maintd.execution.local`) when
    plans may run in process in them; a failure only leaves it to the first such run."""
    from maintd.execution.spark import options_from_settings

    options = options_from_settings(settings.spark)  # a bad setting fails the start, outside the try
    if options.in_process_max_bytes <= 0 or options.in_process_workers != "processes":
        return
    from maintd.execution.local import start_fork_server

    try:
        start_fork_server()
    except Exception as exc:
        logger.warning("the fork server for plans run in process could not be started: {}", exc)


def _http_server(
    settings: Settings, metrics: Metrics, checks: dict[str, Any], liveness: dict[str, Any]
) -> HealthServer | None:
    if not settings.http.enabled:
        return None
    try:
        server = HealthServer(
            metrics,
            checks,
            host=settings.http.host,
            port=settings.http.port,
            liveness=liveness,
            request_timeout=settings.http.request_timeout_seconds,
            max_connections=settings.http.max_connections,
        )
    except OSError as exc:
        raise ConfigError(
            f"cannot listen on {settings.http.host}:{settings.http.port}: {exc.strerror or exc}; "
            "free the port or change http.port"
        ) from None
    return server.start()


def _attach_console(server: HealthServer, settings: Settings, store: StateStore, holder: str) -> None:
    http = settings.http
    if not http.console_served():
        logger.info("web console not served: {} is not a loopback address and neither http.console_token nor "
                    "http.console_password is set (http.console: on serves it without credentials)", http.host)
        return
    server.console = Console(store, settings, holder=holder)
    shown = "with credentials" if server.console.protected else "without credentials"
    logger.info("web console on {}/ ({})", server.url, shown)


@contextmanager
def _signals_set(stop: threading.Event) -> Iterator[None]:
    """SIGTERM and SIGINT set ``stop`` instead of killing the process (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    received: list[str] = []
    announced = threading.Event()

    def _on_signal(signum: int, _frame: FrameType | None) -> None:
        # No logging here: the handler may interrupt the main thread inside loguru, whose lock is not
        # re-entrant; a thread announces the signal instead.
        received.append(signal.Signals(signum).name)
        announced.set()
        stop.set()

    def _announce() -> None:
        announced.wait()
        logger.info("received {}; stopping", received[0])

    threading.Thread(target=_announce, name="maintd-signals", daemon=True).start()
    previous = {sig: signal.signal(sig, _on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


__all__ = ["serve"]
