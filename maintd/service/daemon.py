"""The daemon loop: periodic passes over the tables this replica owns, cheap checks, bounded concurrency,
leases, backoff, graceful stop.

APScheduler 3 runs two periodic *passes* (maintenance and reclamation, with jitter, ``max_instances=1`` and
coalescing) and the renewal of this replica's row and leases. A pass reads the enabled tables in one query
and keeps those this replica owns (:mod:`maintd.service.replicas`) that are not backing off. A table with an
interval the daemon tuned (:mod:`maintd.service.tuning`) is checked on that interval (:func:`due`); passes
then run as often as the shortest one, no more often than ``scheduler.min_maintenance_interval_seconds``.

A maintenance pass first *checks* each table (one look at its log, :mod:`maintd.service.checks`); only tables
that changed, or whose time triggers are due, are queued. Queued runs start under the table's lease in a
bounded thread pool. A reclamation pass queues every table. The per-table work is injected (``maintain``,
``reclaim``, ``check``), so the loop is tested without Spark.

A run that finds nothing writes no row; one that did something, failed or was refused is recorded with one
summary line (:mod:`maintd.service.run_log`).

A failing run gets a retry time (exponential backoff), never stopping the others. On SIGTERM the daemon
takes no new work, lets runs finish for the grace period, records the rest as abandoned (commits are atomic)
and frees its leases. While ``blocked`` names a reason (the Spark driver is gone,
:mod:`maintd.service.spark_driver`) no run starts, and a run that fails meanwhile is recorded abandoned, not
failed: the table is not at fault.

docs/architecture.md ("The daemon") gives the reasons.
"""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from types import FrameType
from typing import Any

from apscheduler.jobstores.base import JobLookupError
from apscheduler.schedulers.background import BackgroundScheduler
from loguru import logger

from maintd.errors import MaintdError
from maintd.execution.budget import Budget
from maintd.planner.targets import Targets
from maintd.service.budget import unhealthiest_first
from maintd.service.checks import CheckLedger
from maintd.service.metrics import Metrics
from maintd.service.recording import RunRow, backoff_seconds, record_failure, record_finished
from maintd.service.records import RunKind, RunResult, RunStatus
from maintd.service.replicas import Membership, live_for
from maintd.service.run_log import log_run, run_context
from maintd.service.store import StateStore
from maintd.settings import Settings

TableJob = Callable[[str], RunResult]
TableCheck = Callable[[str], bool]
"""Whether a table must be planned now (it changed, or a time trigger is due); False: its last plan holds."""


def default_holder() -> str:
    """A holder id unique per process: the pod name (or host name) and the process id."""
    return f"{os.environ.get('POD_NAME') or socket.gethostname()}:{os.getpid()}"


@dataclass(frozen=True, slots=True)
class _Unrecorded:
    """A run whose end could not be written (the store was unreachable): closed as abandoned once it answers."""

    run_id: int
    uri: str
    kind: RunKind
    status: str
    seconds: float
    metrics: dict[str, Any] | None
    error: str | None


@dataclass(frozen=True, slots=True)
class WorkView:
    """A replica's work at one moment (:meth:`Daemon.work`)."""

    running: list[tuple[str, str, float, int | None]]
    """Runs in flight: table URI, kind, seconds since the run began, its run id (None until its row is written)."""
    queued: list[tuple[str, str]]
    """Runs waiting for a free slot, oldest first: kind, table URI."""
    backing_off: list[tuple[str, str, float]]
    """Runs that failed here and wait out their backoff: kind, table URI, seconds left."""


def nothing_to_maintain(settings: Settings, registered: int) -> str | None:
    """What to say when the daemon has no table to maintain and no way to find one (the packaged config's
    ``roots: []`` and ``tables: []``, and an empty store): it would run and do nothing, silently. None when
    it has tables, or roots to search."""
    wh = settings.warehouse
    if registered or wh.tables or (wh.roots and wh.discovery):
        return None
    why = "warehouse.discovery is false" if wh.roots else "warehouse.roots and warehouse.tables are empty"
    return (f"the daemon maintains nothing: {why} and the state store registers no table; set warehouse.roots "
            "to the directories or buckets holding tables (MAINTD_WAREHOUSE__ROOTS='[\"s3://bucket/warehouse\"]') "
            "or warehouse.tables to table URIs (MAINTD_WAREHOUSE__TABLES), in the config file or the environment")


class Daemon:
    """Maintains the tables of a warehouse until stopped.

    Args:
        settings: the settings.
        store: the state store.
        maintain: runs maintenance of one table.
        reclaim: runs reclamation of one table.
        discover: the table URIs under the warehouse roots (None: explicit tables only).
        metrics: where to publish metrics.
        holder: this daemon's lease holder id.
        blocked: why no run can start now (None: runs may start).
        check: tells whether a table must be planned (None: every pass runs every table).
        keep: keeps the targets of the given owned tables (:mod:`maintd.service.tuning`).
        clock: monotonic seconds (tests move it).
        budget: the maintenance budget; while it binds, queued tables start unhealthiest first.
        targets: declared targets by URI, ordering the queue while the budget binds (None: default score).
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
        check: TableCheck | None = None,
        keep: Callable[[list[str]], object] | None = None,
        targets: Callable[[], Mapping[str, Targets]] | None = None,
        clock: Callable[[], float] = time.monotonic,
        budget: Budget | None = None,
    ) -> None:
        self.settings = settings
        self.store = store
        self.jobs = {RunKind.MAINTENANCE: maintain, RunKind.RECLAIM: reclaim}
        self.check = check
        self.keep = keep
        self._targets = targets
        self.budget = budget
        self.discover = discover
        self.metrics = metrics or Metrics()
        self.metrics.attach_store(store, settings.metrics)  # the table gauges every replica serves alike
        if budget is not None:
            self.metrics.attach_budget(budget)
        self.holder = holder or default_holder()
        self.blocked = blocked or (lambda: None)
        s = settings.store
        self.membership = Membership(store, self.holder, live_for(s.lease_duration_seconds,
                                                                  s.lease_renew_interval_seconds))
        self.ledger = CheckLedger()
        self.stopping = threading.Event()
        self._grace_over = threading.Event()
        self._published: set[str] = set()
        self._known: list[str] = []
        self._lock = threading.Lock()
        self._pass_lock = threading.Lock()
        self._in_flight: dict[str, Future[None]] = {}
        self._rows: dict[str, RunRow] = {}
        self._releasing: set[str] = set()
        self._unrecorded: list[_Unrecorded] = []
        self._queue: list[tuple[RunKind, str]] = []
        self._backing_off: dict[tuple[RunKind, str], float] = {}
        """Runs that failed here, with the monotonic time their backoff ends: a pass that read the store's
        schedule before the failure was written must not queue them again."""
        self._clock = clock
        self._intervals: dict[str, float] = {}
        """Tuned check intervals (seconds, floored), by URI, as the last maintenance pass read them."""
        self._last_check: dict[str, float] = {}
        """When (``clock``) each owned table was last checked, or found with its maintenance in flight."""
        self._cadence = settings.scheduler.maintenance_interval_seconds
        """The interval the maintenance pass runs for now: the global one, or a shorter tuned one."""
        self._pool = ThreadPoolExecutor(settings.scheduler.max_concurrent_tables, thread_name_prefix="maintd-table")
        self._scheduler = BackgroundScheduler(timezone="UTC")

    # -- lifecycle --------------------------------------------------------------------------------------

    def start(self) -> None:
        """Schedule the passes (the first ones at once) and the renewal of this replica and its leases."""
        s = self.settings.scheduler
        abandoned = self.store.abandon_runs(self.holder, reason="the daemon restarted")
        if abandoned:
            logger.warning("marked {} run(s) of a previous {} abandoned", abandoned, self.holder)
        self._renew_membership()
        for job_id, kind, interval in (("maintenance", RunKind.MAINTENANCE, s.maintenance_interval_seconds),
                                       ("reclaim", RunKind.RECLAIM, s.reclamation_interval_seconds)):
            # Passes start at random moments within the last `jitter` of the interval, ending a margin before
            # it: a table is checked within its interval (APScheduler's jitter delays a fire without moving
            # the next one), even when a pass reaches it later than the one before did.
            jitter, period = pass_period(interval, s.jitter_seconds)
            self._scheduler.add_job(
                self.run_pass, "interval", args=[kind], id=job_id, seconds=period, jitter=jitter or None,
                next_run_time=_utcnow(), max_instances=1, coalesce=True, misfire_grace_time=None,
            )
        self._scheduler.add_job(
            self.renew_leases,
            "interval",
            id="renew",
            max_instances=1,
            coalesce=True,
            misfire_grace_time=None,  # late on a busy machine is better than skipped: the others would think it gone
            seconds=self.settings.store.lease_renew_interval_seconds,
        )
        if self.keep is not None and self.settings.tuning.enabled:
            self._scheduler.add_job(
                self.keep_targets, "interval", id="targets", max_instances=1, coalesce=True,
                misfire_grace_time=None, seconds=self.settings.tuning.measure_interval_seconds,
            )
        self._scheduler.start()
        logger.info("daemon {} started: at most {} table(s) at once", self.holder, s.max_concurrent_tables)
        idle = nothing_to_maintain(self.settings, len(self.store.list_tables(enabled_only=True)))
        if idle:
            logger.warning(idle)

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
        with self._lock:
            cut_off = list(self._rows.values())
        for row in cut_off:  # a run cut off by the stop is recorded (abandoned below), whatever it had done
            try:
                row.open()
            except MaintdError as exc:
                logger.warning("cannot record the abandoned {} of {}: {}", row.kind.value, row.uri, exc)
        self.flush_checks()
        abandoned = self.store.abandon_runs(self.holder, reason="the daemon stopped (grace period over)")
        released = self.store.release_all(self.holder)
        try:
            self.membership.leave()
        except MaintdError as exc:
            logger.warning("cannot remove replica {} from the live replicas: {} (it will expire)", self.holder, exc)
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

    def register_candidates(self) -> None:
        """Register the explicit tables of the settings and the tables discovery finds."""
        explicit = list(self.settings.warehouse.tables)
        if explicit:
            self.store.register_tables(explicit, source="explicit")
        if self.discover is not None and self.settings.warehouse.discovery:
            found = list(self.discover())
            if found:
                self.store.register_tables(found, source="discovered")

    def candidates(self) -> list[str]:
        """Registered enabled tables, explicit ones from the settings, and discovered ones (registered now)."""
        self.register_candidates()
        return [t.uri for t in self.store.list_tables(enabled_only=True)]

    def run_pass(self, kind: RunKind, *, only: set[str] | None = None) -> list[str]:
        """Check the tables this replica owns (``only`` those, if given) and queue the runs they need;
        start queued runs in the free slots.

        Returns the tables started now. Runs that find no free slot stay queued and start as slots free
        up (see :meth:`fill`), so a pass that fires while every slot is busy (reclamation behind a long
        maintenance, say) is delayed, not skipped until its next interval.
        """
        if self.stopping.is_set() or self.blocked() is not None:
            return []
        began = time.perf_counter()
        try:
            if kind is RunKind.RECLAIM:
                self.prune_history()
            self.register_candidates()
            now, schedule = self.store.schedule(kind)
            if kind is RunKind.MAINTENANCE:
                self._intervals = self._tuned_intervals()
            self.publish_tables(set(schedule))
        except MaintdError as exc:
            logger.error("{} pass failed: {}", kind.value, exc)
            return []
        self._known = sorted(schedule)
        owned = self.membership.owned(self._known)
        if only is not None:
            owned = [uri for uri in owned if uri in only]
        busy = {uri for uri, _ in self._snapshot()}
        not_due = 0
        if kind is RunKind.MAINTENANCE:
            if only is None:
                self._follow_cadence(owned)
            owned, not_due = self._due(owned)
        wanted, unchanged, backing_off = self._check(kind, owned, busy, schedule, now)
        with self._lock:
            kept = [(k, uri) for k, uri in self._queue if k is not kind or uri in schedule]
            queued = {uri for k, uri in kept if k is kind}
            clock = time.monotonic()
            self._backing_off = {entry: end for entry, end in self._backing_off.items() if end > clock}
            self._queue = kept + [(kind, uri) for uri in wanted
                                  if uri not in queued and (kind, uri) not in self._backing_off]
        self.flush_checks()
        started = self.fill()
        seconds = time.perf_counter() - began
        self.metrics.observe_pass(kind.value, seconds, checked=len(owned) - backing_off, unchanged=unchanged)
        logger.log("DEBUG" if only is not None or self.stopping.is_set() else "INFO",
                   "{} pass: {} of {} table(s) owned by {} ({} live replica(s)); {} unchanged, {} queued, {} backing "
                   "off, {} busy{}; {:.2f} s", kind.value, len(owned) + not_due, len(schedule), self.holder,
                   len(self.membership.live), unchanged, len(wanted), backing_off,
                   len(busy & set(owned)), f", {not_due} not due (tuned intervals)" if not_due else "", seconds)
        return started

    def _check(
        self, kind: RunKind, owned: list[str], busy: set[str], schedule: dict[str, datetime | None], now: datetime
    ) -> tuple[list[str], int, int]:
        """The owned tables that need a run now; also how many were unchanged and how many are backing off."""
        wanted: list[str] = []
        unchanged = backing_off = 0
        wall = _utcnow()
        checked: list[str] = []
        stamp = self._clock()  # the pass's moment: passes are what the margin of pass_period spaces
        for uri in owned:
            retry = schedule.get(uri)
            if retry is not None and retry > now:
                backing_off += 1
                continue
            if kind is RunKind.MAINTENANCE:
                checked.append(uri)
            if kind is RunKind.MAINTENANCE and self.check is not None and uri in busy and self._running(uri, kind):
                continue  # its maintenance in flight is its check (a reclamation in flight is not)
            if kind is RunKind.MAINTENANCE:
                needed = self._needs_plan(uri)
                self.ledger.checked(uri, wall, planned=needed)
                if not needed:
                    unchanged += 1
                    continue
            wanted.append(uri)
        if self._intervals:  # only tables with tuned intervals make a pass skip tables
            with self._lock:
                self._last_check.update(dict.fromkeys(checked, stamp))
        return wanted, unchanged, backing_off

    def _tuned_intervals(self) -> dict[str, float]:
        """The tuned check intervals, floored; none while tuning is off (the tuned knobs are then not applied
        either). A failed read keeps the last ones: the pass goes on."""
        s = self.settings
        if not s.tuning.enabled:
            return {}
        try:
            tuned = self.store.tuned_intervals()
        except MaintdError as exc:
            logger.warning("tuned check intervals not read (the last ones are kept): {}", exc)
            return self._intervals
        floor = s.scheduler.min_maintenance_interval_seconds
        return {uri: max(seconds, floor) for uri, seconds in tuned.items() if seconds > 0}

    def _follow_cadence(self, owned: list[str]) -> None:
        """Run the maintenance pass as often as the shortest check interval of the owned tables needs; the
        change takes effect from the next pass."""
        s = self.settings.scheduler
        cadence = min([s.maintenance_interval_seconds, *(self._intervals[u] for u in owned if u in self._intervals)])
        if cadence == self._cadence:
            return
        self._cadence = cadence
        jitter, period = pass_period(cadence, s.jitter_seconds)
        try:
            self._scheduler.reschedule_job("maintenance", trigger="interval", seconds=period, jitter=jitter or None)
        except JobLookupError:  # not started (a pass run by hand)
            return
        logger.info("maintenance passes now every {:g} s (the shortest check interval of the tables owned)", cadence)

    def _due(self, owned: list[str]) -> tuple[list[str], int]:
        """The owned tables to check in this pass, and how many wait for a later one (their tuned interval is
        longer than the pass's and not over by the next pass)."""
        s = self.settings.scheduler
        if not self._intervals:  # every table's interval is the pass's: all are checked, as ever
            return owned, 0
        known = set(self._known)
        with self._lock:  # forget tables no longer registered; the others may come back to this replica
            self._last_check = {uri: at for uri, at in self._last_check.items() if uri in known}
            last_check = dict(self._last_check)
        clock = self._clock()
        out: list[str] = []
        for uri in owned:
            last = last_check.get(uri)
            interval = self._intervals.get(uri, s.maintenance_interval_seconds)
            if last is None or due(clock - last, interval, self._cadence, s.jitter_seconds):
                out.append(uri)
        return out, len(owned) - len(out)

    def _needs_plan(self, uri: str) -> bool:
        if self.check is None:
            return True
        began = time.perf_counter()
        try:
            needed = bool(self.check(uri))
        except Exception as exc:  # the run will meet the error and record it
            logger.debug("check of {} failed ({}); planning it", uri, exc)
            needed = True
        self.metrics.observe_check(time.perf_counter() - began, "planned" if needed else "unchanged")
        if not needed:
            logger.debug("{} unchanged since its last plan", uri)
        return needed

    def flush_checks(self) -> int:
        """Write the checks counted since the last flush onto their tables' rows; returns how many tables."""
        records = self.ledger.drain()
        if not records:
            return 0
        try:
            return self.store.record_checks(self.holder, records)
        except MaintdError as exc:
            self.ledger.restore(records)
            logger.warning("cannot record the checks of {} table(s) (kept for the next pass): {}", len(records), exc)
            return 0

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
        started: list[str] = []
        while True:
            busy = {uri for uri, _ in self._snapshot()}
            free = self.settings.scheduler.max_concurrent_tables - len(busy)
            picks = self._next_queued(busy, free, self._queue_order() if free > 0 else None)
            if not picks:
                return started
            wanted = [uri for _, uri in picks]
            leased = set(self.store.acquire_leases(self.holder, wanted, self.settings.store.lease_duration_seconds,
                                                   free))
            with self._lock:  # taken now, or leased by another replica, which runs it: either way off the queue
                self._queue = [entry for entry in self._queue if entry not in picks]
            for kind, uri in picks:
                if uri not in leased:
                    continue
                with self._lock:
                    if self.stopping.is_set():
                        break
                    self._in_flight[uri] = self._pool.submit(self._run_table, uri, kind)
                started.append(uri)
            for uri in leased - set(started):
                self.store.release_lease(self.holder, uri)

    def _next_queued(self, busy: set[str], free: int,
                     order: list[tuple[RunKind, str]] | None = None) -> list[tuple[RunKind, str]]:
        """Up to ``free`` queued runs, oldest first (or in ``order``), one per table, of tables not running."""
        picks: list[tuple[RunKind, str]] = []
        seen: set[str] = set()
        if free <= 0:
            return picks
        with self._lock:
            queued = set(self._queue)
            for kind, uri in [e for e in order if e in queued] if order is not None else self._queue:
                if uri in busy or uri in seen:
                    continue
                seen.add(uri)
                picks.append((kind, uri))
                if len(picks) == free:
                    break
        return picks

    def keep_targets(self) -> None:
        """Keep the targets of the tables this replica owns (:mod:`maintd.service.tuning`); errors are logged."""
        if self.keep is None or self.stopping.is_set() or not self.settings.tuning.enabled:
            return
        try:
            self.keep(self.membership.owned(self._known))
        except Exception as exc:  # the next interval tries again; maintenance goes on meanwhile
            logger.error("keeping targets failed: {}: {}", type(exc).__name__, exc)

    def _queue_order(self) -> list[tuple[RunKind, str]] | None:
        """The queue unhealthiest first while the budget binds (None: oldest first, as queued)."""
        if self.budget is None or not self.budget.binding():
            return None
        with self._lock:
            queue = list(self._queue)
        if len(queue) < 2:
            return None
        layouts = self.store.health_measures(uri for _, uri in queue)
        return unhealthiest_first(queue, layouts, _utcnow(), self._targets() if self._targets else None)

    def prune_history(self) -> int:
        """Delete finished runs older than ``store.history_retention_days``; returns how many."""
        cutoff = self.store.db_now() - timedelta(days=self.settings.store.history_retention_days)
        pruned = self.store.prune_history(cutoff)
        if pruned:
            logger.info("pruned {} run(s) that ended before {} from the history", pruned, cutoff.isoformat())
        return pruned

    def publish_tables(self, current: set[str] | None = None) -> None:
        """Forget the counters of tables no longer maintained (the table gauges come from the store)."""
        if current is None:
            current = {record.uri for record in self.store.list_tables() if record.enabled}
        for uri in self._published - current:
            self.metrics.forget_table(uri)
        self._published = current
        self.metrics.set_table_count(len(current))

    # -- renewal ----------------------------------------------------------------------------------------

    def renew_leases(self) -> None:
        """Renew this replica's row (taking over the tables of replicas gone), close runs left unrecorded
        by a store outage, and extend the leases of the tables in flight; report any lost."""
        self._renew_membership()
        self._close_unrecorded()
        self.flush_checks()
        with self._lock:
            busy = {uri: future for uri, future in self._in_flight.items() if uri not in self._releasing}
        if not busy:
            return
        try:
            kept = set(self.store.renew_leases(self.holder, self.settings.store.lease_duration_seconds, busy))
        except MaintdError as exc:
            logger.error("cannot renew leases: {}", exc)
            return
        with self._lock:  # a run that ended meanwhile released its lease: not a loss
            lost = [uri for uri, future in busy.items()
                    if uri not in kept and self._in_flight.get(uri) is future and uri not in self._releasing]
        for uri in sorted(lost):
            logger.error("lost the lease of {} while maintaining it", uri)

    def _renew_membership(self) -> None:
        before = set(self.membership.owned(self._known))
        try:
            joined, left = self.membership.renew()
        except MaintdError as exc:
            logger.warning("cannot renew replica {}: {}", self.holder, exc)
            return
        self.metrics.set_replicas(len(self.membership.live))
        if not (joined or left):
            return
        logger.info("live replicas now {} (joined: {}; left: {})", ", ".join(self.membership.live),
                    ", ".join(sorted(joined)) or "none", ", ".join(sorted(left)) or "none")
        taken = set(self.membership.owned(self._known)) - before
        if taken and self._scheduler.running:  # check the tables taken over now, not at the next pass
            self.run_pass(RunKind.MAINTENANCE, only=taken)

    def _close_unrecorded(self) -> None:
        with self._lock:
            pending, self._unrecorded = self._unrecorded, []
        for i, run in enumerate(pending):
            error = (f"the state store could not be reached when the run ended ({run.status}"
                     f"{': ' + run.error if run.error else ''}); closed as abandoned once it answered")
            try:
                self.store.finish_run(run.run_id, RunStatus.ABANDONED, error=error, metrics=run.metrics)
            except MaintdError:
                with self._lock:
                    self._unrecorded = pending[i:] + self._unrecorded
                return
            log_run(run.kind.value, run.uri, run.run_id, RunStatus.ABANDONED.value, run.seconds, run.metrics,
                    error=error)

    # -- one run ----------------------------------------------------------------------------------------

    def _run_table(self, uri: str, kind: RunKind) -> None:
        row = RunRow(self.store, uri, kind, self.holder)
        with self._lock:
            self._rows[uri] = row
        self.metrics.in_flight.labels(kind=kind.value).inc()
        try:
            with run_context(uri, None, kind.value), row.current():
                try:
                    result = self.jobs[kind](uri)
                except Exception as exc:  # one table's failure must never stop the others
                    self._record_exception(uri, kind, row, exc)
                else:
                    self._record(uri, kind, row, result)
        finally:
            self.metrics.in_flight.labels(kind=kind.value).dec()
            # Release *before* the table leaves the in-flight set: once it has left, a fill in another
            # thread may lease it again (extending this holder's lease) and start its next run, and a
            # release after that would free the lease under that run for another replica to take. The
            # renewal skips tables being released: their lease is given up, not lost.
            with self._lock:
                self._releasing.add(uri)
            try:
                self.store.release_lease(self.holder, uri)
            except MaintdError as exc:
                logger.warning("cannot release the lease of {}: {} (it will expire)", uri, exc)
            with self._lock:
                self._in_flight.pop(uri, None)
                self._rows.pop(uri, None)
                self._releasing.discard(uri)
                idle = not self._in_flight and not self._queue
            self.fill()  # a slot is free: start what waits in the queue
            if idle:  # the work of the pass is done: what it found is written now, not at the next pass
                self.flush_checks()

    def _record(self, uri: str, kind: RunKind, row: RunRow, result: RunResult) -> None:
        seconds = time.monotonic() - row.started
        if self._grace_over.is_set():
            logger.warning("{} of {} ended after the grace period; it stays recorded as abandoned", kind.value, uri)
            return
        if row.run_id is None and result.status is RunStatus.SKIPPED:  # found nothing to do: no run
            self.ledger.found_nothing(uri, kind, _utcnow(), result.layout)
            self.metrics.observe_run(kind.value, result.status.value, seconds)
            logger.debug("{} of {} found nothing to do in {:.3f} s", kind.value, uri, seconds)
            return
        self.ledger.ran(uri, kind)
        try:
            run_id = row.open()
            self.store.record_decisions(run_id, result.decisions)
            blocked = self.blocked()
            if result.status is RunStatus.FAILED and blocked is not None:
                self._record_abandoned(uri, kind, run_id, seconds, result.error or blocked, result=result)
            elif result.status is RunStatus.FAILED:
                error_type = result.error_type or "MaintenanceFailed"
                self._record_failure(uri, kind, run_id, error_type, result.error or error_type, seconds,
                                     result=result)
            else:
                record_finished(self.store, uri, kind, run_id, result, seconds)
                self.metrics.observe_run(kind.value, result.status.value, seconds)
        except MaintdError as exc:
            self._unrecordable(row, result.status.value, seconds, result.metrics, result.error, exc)

    def _record_exception(self, uri: str, kind: RunKind, row: RunRow, exc: Exception) -> None:
        seconds = time.monotonic() - row.started
        error = f"{type(exc).__name__}: {exc}"
        self.ledger.ran(uri, kind)
        try:
            if self._grace_over.is_set():
                logger.warning("{} of {} failed after the grace period ({}); it stays abandoned", kind.value, uri, exc)
            elif self.blocked() is not None:
                self._record_abandoned(uri, kind, row.open(), seconds, error)
            else:
                self._record_failure(uri, kind, row.open(), type(exc).__name__, error, seconds, exc=exc)
        except MaintdError as store_error:
            self._unrecordable(row, RunStatus.FAILED.value, seconds, None, error, store_error)

    def _unrecordable(self, row: RunRow, status: str, seconds: float, metrics: dict[str, Any] | None,
                      error: str | None, exc: MaintdError) -> None:
        """The store failed while a run's end was written: close it as abandoned once the store answers."""
        if row.run_id is None:
            logger.warning("{} of {} ({}, {:.1f} s) could not be recorded: {}", row.kind.value, row.uri, status,
                           seconds, exc)
            return
        logger.warning("the end of run {} ({}) cannot be recorded now: {}; it will be closed as abandoned once "
                       "the state store answers", row.run_id, status, exc)
        with self._lock:
            self._unrecorded.append(_Unrecorded(row.run_id, row.uri, row.kind, status, seconds, metrics, error))

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
        # read before the store dates the retry: the backoff held here ends no later than the stored one, so a
        # table the store says may be retried is never still held back here (however slow the write)
        before = time.monotonic()
        delay = record_failure(
            self.store, self.settings.scheduler, uri, kind, run_id, error, seconds, result=result, exc=exc
        )
        with self._lock:  # a run queued meanwhile, or by a pass that read the schedule before the failure was
            # written, waits for the backoff
            self._backing_off[(kind, uri)] = before + delay
            self._queue = [entry for entry in self._queue if entry != (kind, uri)]

    def backoff_seconds(self, failures: int) -> float:
        """Delay before retrying a table after ``failures`` consecutive failures (exponential, bounded)."""
        return backoff_seconds(self.settings.scheduler, failures)

    def work(self) -> WorkView:
        """What this replica is doing now, for the console: runs in flight, runs queued (oldest first) and runs
        waiting out a backoff here, read under the daemon's lock (a copy: nothing the caller does changes them)."""
        clock = time.monotonic()
        with self._lock:
            running = [(uri, row.kind.value, clock - row.started, row.run_id) for uri, row in self._rows.items()]
            queued = [(kind.value, uri) for kind, uri in self._queue]
            backing = [(kind.value, uri, end - clock) for (kind, uri), end in self._backing_off.items() if end > clock]
        return WorkView(sorted(running), queued, sorted(backing))

    def _running(self, uri: str, kind: RunKind) -> bool:
        """Whether a run of ``kind`` of ``uri`` is in flight."""
        with self._lock:
            row = self._rows.get(uri)
        return row is not None and row.kind is kind

    def _snapshot(self) -> list[tuple[str, Future[None]]]:
        with self._lock:
            return list(self._in_flight.items())


PASS_MARGIN = 0.05
"""Share of the interval a pass is scheduled early by: a pass reaches a table some time after it starts
(the store's query, the checks before it; seconds under load), and that time varies between passes."""


def pass_period(interval: float, jitter_seconds: float) -> tuple[float, float]:
    """``(jitter, period)`` of a periodic pass: fires ``period`` apart, each delayed by up to ``jitter``, so that
    two checks of a table are at most ``interval`` minus the margin apart, plus how much later the second
    pass reached it."""
    jitter = min(jitter_seconds, interval / 4)
    return jitter, max(interval - jitter - interval * PASS_MARGIN, interval / 2)


def due(elapsed: float, interval: float, cadence: float, jitter_seconds: float) -> bool:
    """Whether a table checked ``elapsed`` seconds ago, with check interval ``interval``, must be checked by a
    pass that runs for ``cadence`` (:func:`pass_period`). The next pass may come a whole period plus its
    jitter later, so a table is skipped only while its next check would still be ``interval`` minus the same
    margin after its last. A table whose interval is the pass's own (or shorter) is checked at every pass."""
    if interval <= cadence:
        return True
    jitter, period = pass_period(cadence, jitter_seconds)
    return elapsed + period + jitter > interval * (1 - PASS_MARGIN)


def _utcnow() -> datetime:
    return datetime.now(UTC)


__all__ = ["Daemon", "TableCheck", "TableJob", "WorkView", "default_holder", "due", "pass_period"]
