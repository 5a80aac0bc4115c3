"""The daemon loop: periodic passes over every table, bounded concurrency, leases, backoff, graceful stop.

APScheduler 3 runs two periodic *passes* (maintenance and reclamation, each with jitter,
``max_instances=1`` and coalescing of missed runs) and the lease renewal. A pass lists the candidate
tables, keeps those that are due (enabled, not backing off after failures), leases as many as there are
free slots, and hands each to a bounded thread pool. The per-table work is injected (``maintain``,
``reclaim``), so the loop is tested without Spark.

A failing run is recorded with a retry time (exponential backoff, per table and run kind) and never
stops the others: a table whose maintenance fails is still reclaimed, and the other way round. On
SIGTERM the daemon takes no new work, lets in-flight runs finish for the grace period, then records
the rest as abandoned and releases its leases. A run that did not finish did not commit: commits are
atomic in the table's log, so abandoning is always safe.

While ``blocked`` names a reason (the Spark driver is gone, see :mod:`maintd.service.spark_driver`) no
run starts, and a run that fails meanwhile is recorded abandoned rather than failed: the table is not
at fault and must not wait out a backoff once the daemon is restarted.

Every run ends with one summary line (:mod:`maintd.service.run_log`), and every record logged while it
runs carries its table and run id.
"""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from types import FrameType

from apscheduler.schedulers.background import BackgroundScheduler
from loguru import logger

from maintd.errors import MaintdError
from maintd.service.metrics import Metrics
from maintd.service.recording import backoff_seconds, record_failure, record_finished
from maintd.service.records import RunKind, RunResult, RunStatus
from maintd.service.run_log import log_run, run_context
from maintd.service.store import StateStore
from maintd.settings import Settings

TableJob = Callable[[str], RunResult]


def default_holder() -> str:
    """A holder id unique per process: the pod name (or host name) and the process id."""
    return f"{os.environ.get('POD_NAME') or socket.gethostname()}:{os.getpid()}"


class Daemon:
    """Maintains the tables of a warehouse until stopped.

    Args:
        settings: the settings (scheduler, store, warehouse groups are used).
        store: the state store.
        maintain: runs maintenance of one table (plan, execute, commit).
        reclaim: runs reclamation of one table.
        discover: returns the table URIs found under the warehouse roots (None: only explicit tables).
        metrics: where to publish metrics.
        holder: this daemon's lease holder id.
        blocked: returns why no run can start now (None: runs may start).
    """

    def __init__(
        self,
        settings: Settings,
        store: StateStore,
        maintain: TableJob,
        reclaim: TableJob,
        *,
        discover: Callable[[], Iterable[str]] | None = None,
        metrics: Metrics | None = None,
        holder: str | None = None,
        blocked: Callable[[], str | None] | None = None,
    ) -> None:
        self.settings = settings
        self.store = store
        self.jobs = {RunKind.MAINTENANCE: maintain, RunKind.RECLAIM: reclaim}
        self.discover = discover
        self.metrics = metrics or Metrics()
        self.metrics.attach_store(store)  # the table gauges every replica serves alike
        self.holder = holder or default_holder()
        self.blocked = blocked or (lambda: None)
        self.stopping = threading.Event()
        self._grace_over = threading.Event()
        self._published: set[str] = set()
        self._lock = threading.Lock()
        self._pass_lock = threading.Lock()
        self._in_flight: dict[str, Future[None]] = {}
        self._queue: list[tuple[RunKind, str]] = []
        self._pool = ThreadPoolExecutor(settings.scheduler.max_concurrent_tables, thread_name_prefix="maintd-table")
        self._scheduler = BackgroundScheduler(timezone="UTC")

    # -- lifecycle --------------------------------------------------------------------------------------

    def start(self) -> None:
        """Schedule the passes (the first ones at once) and the lease renewal."""
        s = self.settings.scheduler
        abandoned = self.store.abandon_runs(self.holder, reason="the daemon restarted")
        if abandoned:
            logger.warning("marked {} run(s) of a previous {} abandoned", abandoned, self.holder)
        common = {"trigger": "interval", "max_instances": 1, "coalesce": True, "jitter": s.jitter_seconds or None}
        self._scheduler.add_job(
            self.run_pass,
            args=[RunKind.MAINTENANCE],
            id="maintenance",
            seconds=s.maintenance_interval_seconds,
            next_run_time=_utcnow(),
            **common,
        )
        self._scheduler.add_job(
            self.run_pass,
            args=[RunKind.RECLAIM],
            id="reclaim",
            seconds=s.reclamation_interval_seconds,
            next_run_time=_utcnow(),
            **common,
        )
        self._scheduler.add_job(
            self.renew_leases,
            "interval",
            id="renew",
            max_instances=1,
            coalesce=True,
            seconds=self.settings.store.lease_renew_interval_seconds,
        )
        self._scheduler.start()
        logger.info("daemon {} started: at most {} table(s) at once", self.holder, s.max_concurrent_tables)

    def stop(self, grace_seconds: float | None = None) -> None:
        """Take no new work; wait up to the grace period for in-flight runs; abandon the rest; release leases."""
        grace = self.settings.scheduler.shutdown_grace_seconds if grace_seconds is None else grace_seconds
        self.stopping.set()
        if self._scheduler.running:
            self._scheduler.shutdown(wait=False)
        deadline = time.monotonic() + grace
        for uri, future in self._snapshot():
            try:
                future.result(timeout=max(0.0, deadline - time.monotonic()))
            except TimeoutError:
                logger.warning("{} did not finish within the {} s grace period; abandoning it", uri, grace)
        self._grace_over.set()
        self._pool.shutdown(wait=False, cancel_futures=True)
        abandoned = self.store.abandon_runs(self.holder, reason="the daemon stopped (grace period over)")
        released = self.store.release_all(self.holder)
        logger.info("daemon {} stopped: {} run(s) abandoned, {} lease(s) released", self.holder, abandoned, released)

    def run_until_signalled(self) -> int:
        """Run until SIGTERM or SIGINT, then stop gracefully; returns the exit code (0)."""
        received: list[str] = []
        stop = threading.Event()

        def _on_signal(signum: int, _frame: FrameType | None) -> None:
            received.append(signal.Signals(signum).name)  # no logging in a signal handler (loguru's lock)
            stop.set()

        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, _on_signal)
        self.start()
        stop.wait()
        logger.info("received {}; stopping", received[0])
        self.stop()
        return 0

    # -- passes -----------------------------------------------------------------------------------------

    def candidates(self) -> list[str]:
        """Registered enabled tables, explicit ones from the settings, and discovered ones (registered now)."""
        explicit = list(self.settings.warehouse.tables)
        if explicit:
            self.store.register_tables(explicit, source="explicit")
        if self.discover is not None and self.settings.warehouse.discovery:
            found = list(self.discover())
            if found:
                self.store.register_tables(found, source="discovered")
        return [t.uri for t in self.store.list_tables(enabled_only=True)]

    def run_pass(self, kind: RunKind) -> list[str]:
        """Queue a run of ``kind`` for every candidate table and start queued runs in the free slots.

        Returns the tables started now. Runs that find no free slot stay queued and start as slots free
        up (see :meth:`fill`), so a pass that fires while every slot is busy (reclamation behind a long
        maintenance, say) is delayed, not skipped until its next interval.
        """
        if self.stopping.is_set() or self.blocked() is not None:
            return []
        try:
            if kind is RunKind.RECLAIM:
                self.prune_history()
            candidates = self.candidates()
            self.publish_tables()
        except MaintdError as exc:
            logger.error("{} pass failed: {}", kind.value, exc)
            return []
        with self._lock:
            wanted = set(candidates)
            kept = [(k, uri) for k, uri in self._queue if k is not kind or uri in wanted]
            queued = {uri for k, uri in kept if k is kind}
            self._queue = kept + [(kind, uri) for uri in candidates if uri not in queued]
        return self.fill()

    def fill(self) -> list[str]:
        """Start queued runs, oldest first, in the free slots; one run per table at a time, each under a lease."""
        # Passes and finishing runs call this from several threads; one at a time, so no table starts twice.
        with self._pass_lock:
            if self.stopping.is_set() or self.blocked() is not None:
                return []
            try:
                return self._start_queued()
            except MaintdError as exc:
                logger.error("cannot start queued runs: {}", exc)
                return []

    def _start_queued(self) -> list[str]:
        busy = {uri for uri, _ in self._snapshot()}
        free = self.settings.scheduler.max_concurrent_tables - len(busy)
        with self._lock:
            queue = list(self._queue)
        if free <= 0:
            return []
        waiting = [(kind, uri) for kind, uri in queue if uri not in busy]
        due: set[tuple[RunKind, str]] = set()
        for kind in {kind for kind, _ in waiting}:
            due.update((kind, uri) for uri in self.store.due_tables([u for k, u in waiting if k is kind], kind))
        with self._lock:  # runs backing off or of disabled tables leave the queue; a later pass queues them again
            checked = set(waiting)  # runs queued meanwhile by a pass are kept for the next fill
            self._queue = [(k, uri) for k, uri in self._queue if (k, uri) in due or (k, uri) not in checked]
        next_kind: dict[str, RunKind] = {}
        for kind, uri in waiting:  # the oldest due run of each table
            if (kind, uri) in due:
                next_kind.setdefault(uri, kind)
        if not next_kind:
            return []
        wanted = list(next_kind)
        leased = self.store.acquire_leases(self.holder, wanted, self.settings.store.lease_duration_seconds, free)
        started = []
        for uri in leased:
            kind = next_kind[uri]
            with self._lock:
                if self.stopping.is_set():
                    break
                if (kind, uri) in self._queue:
                    self._queue.remove((kind, uri))
                self._in_flight[uri] = self._pool.submit(self._run_table, uri, kind)
                started.append(uri)
        for uri in set(leased) - set(started):
            self.store.release_lease(self.holder, uri)
        return started

    def prune_history(self) -> int:
        """Delete finished runs older than ``store.history_retention_days``; returns how many."""
        cutoff = self.store.db_now() - timedelta(days=self.settings.store.history_retention_days)
        pruned = self.store.prune_history(cutoff)
        if pruned:
            logger.info("pruned {} run(s) that ended before {} from the history", pruned, cutoff.isoformat())
        return pruned

    def publish_tables(self) -> None:
        """Forget the counters of tables no longer maintained (the table gauges come from the store)."""
        records = self.store.list_tables()
        current = {record.uri for record in records if record.enabled}
        for uri in self._published - current:
            self.metrics.forget_table(uri)
        self._published = current

    def renew_leases(self) -> None:
        """Extend the leases of the tables in flight; warn about any lost (another replica may take it)."""
        with self._lock:
            busy = set(self._in_flight)
        if not busy:
            return
        try:
            kept = set(self.store.renew_leases(self.holder, self.settings.store.lease_duration_seconds, busy))
        except MaintdError as exc:
            logger.error("cannot renew leases: {}", exc)
            return
        for uri in sorted(busy - kept):
            logger.error("lost the lease of {} while maintaining it", uri)

    def _run_table(self, uri: str, kind: RunKind) -> None:
        started = time.monotonic()
        run_id: int | None = None
        self.metrics.in_flight.labels(kind=kind.value).inc()
        try:
            run_id = self.store.start_run(uri, kind, holder=self.holder)
            with run_context(uri, run_id, kind.value):
                self._run_and_record(uri, kind, run_id, started)
        except Exception as exc:  # one table's failure must never stop the others
            seconds = time.monotonic() - started
            if self._grace_over.is_set():
                logger.warning("{} of {} failed after the grace period ({}); it stays abandoned", kind.value, uri, exc)
            elif self.blocked() is not None and run_id is not None:
                self._record_abandoned(uri, kind, run_id, seconds, f"{type(exc).__name__}: {exc}")
            else:
                self._record_failure(
                    uri, kind, run_id, type(exc).__name__, f"{type(exc).__name__}: {exc}", seconds, exc=exc
                )
        finally:
            self.metrics.in_flight.labels(kind=kind.value).dec()
            # Release *before* the table leaves the in-flight set: once it has left, a fill in another
            # thread may lease it again (extending this holder's lease) and start its next run, and a
            # release after that would free the lease under that run for another replica to take.
            try:
                self.store.release_lease(self.holder, uri)
            except MaintdError as exc:
                logger.warning("cannot release the lease of {}: {} (it will expire)", uri, exc)
            with self._lock:
                self._in_flight.pop(uri, None)
            self.fill()  # a slot is free: start what waits in the queue

    def _run_and_record(self, uri: str, kind: RunKind, run_id: int, started: float) -> None:
        result = self.jobs[kind](uri)
        seconds = time.monotonic() - started
        if self._grace_over.is_set():
            logger.warning("{} of {} ended after the grace period; it stays recorded as abandoned", kind.value, uri)
            return
        self.store.record_decisions(run_id, result.decisions)
        blocked = self.blocked()
        if result.status is RunStatus.FAILED and blocked is not None:
            self._record_abandoned(uri, kind, run_id, seconds, result.error or blocked, result=result)
        elif result.status is RunStatus.FAILED:
            error_type = result.error_type or "MaintenanceFailed"
            self._record_failure(uri, kind, run_id, error_type, result.error or error_type, seconds, result=result)
        else:
            record_finished(self.store, uri, kind, run_id, result, seconds)
            self.metrics.observe_run(kind.value, result.status.value, seconds)

    def _record_abandoned(
        self, uri: str, kind: RunKind, run_id: int, seconds: float, error: str, *, result: RunResult | None = None
    ) -> None:
        """A run that failed because the daemon cannot work (its Spark driver is gone): no backoff for the table."""
        reason = f"{self.blocked()}; the run was abandoned ({error})"
        self.store.finish_run(
            run_id, RunStatus.ABANDONED, error=reason, metrics=result.metrics if result else None,
            plan=result.plan if result else None,
        )
        self.metrics.observe_run(kind.value, RunStatus.ABANDONED.value, seconds)
        log_run(kind.value, uri, run_id, RunStatus.ABANDONED.value, seconds, result.metrics if result else None,
                error=reason)

    def _record_failure(
        self,
        uri: str,
        kind: RunKind,
        run_id: int | None,
        error_type: str,
        error: str,
        seconds: float,
        *,
        exc: Exception | None = None,
        result: RunResult | None = None,
    ) -> None:
        self.metrics.observe_run(kind.value, RunStatus.FAILED.value, seconds, error=error_type)
        record_failure(
            self.store, self.settings.scheduler, uri, kind, run_id, error, seconds, result=result, exc=exc
        )

    def backoff_seconds(self, failures: int) -> float:
        """Delay before retrying a table after ``failures`` consecutive failures (exponential, bounded)."""
        return backoff_seconds(self.settings.scheduler, failures)

    def _snapshot(self) -> list[tuple[str, Future[None]]]:
        with self._lock:
            return list(self._in_flight.items())


def _utcnow() -> datetime:
    return datetime.now(UTC)


__all__ = ["Daemon", "TableJob", "default_holder"]
