"""The daemon's per-table work: maintenance through the :class:`~maintd.execution.runner.Runner`,
reclamation through :func:`maintd.reclaim.reclaim_table`, discovery of tables, and the metrics of each.

The :class:`~maintd.service.daemon.Daemon` (and ``maintd run``, see :mod:`maintd.service.oneshot`)
schedules, leases and records; this module does the work and turns what happened into a
:class:`~maintd.service.records.RunResult` (with the table's layout, which the store keeps as the one
source of the table gauges) and counters. It shares one Runner (so one policy file and one
SparkSession) between every table thread.

A maintenance run first plans from the table as it is. A plan with nothing to do ends the run there (no
run is recorded, see :class:`~maintd.service.recording.RunRow`) and is remembered with the version it saw
and its next time trigger, so that :meth:`TableJobs.check` can tell from one look at the log whether the
next check needs to plan at all (:mod:`maintd.service.checks`). A plan with work hands the table to the
Runner, which plans again from the newest version and executes.

A run only commits while this daemon still holds the table's lease: the lease is renewed at the moment
the rewrite is about to commit, and a lost lease (expired during a long rewrite, or released because
the daemon stopped after its grace period) abandons the run before its commit. Its written files are
then unreferenced and go with orphan cleanup, so two daemons never both commit maintenance of one
table for the same lease period.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from loguru import logger

from maintd.errors import LeaseLostError, MaintdError
from maintd.execution.budget import Budget
from maintd.execution.commit import OPERATION as MAINTENANCE_OPERATION
from maintd.execution.runner import Progress, Runner, SessionForRun, TableHealth, TableRunSummary
from maintd.planner.policy_files import ResolvedPolicy
from maintd.planner.targets import Targets
from maintd.service.checks import LogWatch
from maintd.service.discovery import RootScan, discover, tables_of
from maintd.service.metrics import Metrics
from maintd.service.recording import open_run
from maintd.service.records import Decision, RunResult, RunStatus
from maintd.service.store import StateStore
from maintd.settings import Settings
from maintd.table import Table

Clock = Callable[[], datetime]

#: Runner summary status to run status. ``partial`` (some tasks failed) counts as a failure: it is
#: reported and retried after a backoff, although what did commit stays committed.
_STATUS = {
    "ok": RunStatus.SUCCEEDED,
    "nothing": RunStatus.SKIPPED,
    "dry-run": RunStatus.SKIPPED,
    "partial": RunStatus.FAILED,
    "failed": RunStatus.FAILED,
}


def _utcnow() -> datetime:
    return datetime.now(UTC)


class NotReadyError(RuntimeError):
    """A readiness check that fails: its message is served by ``/readyz``."""


class TableJobs:
    """Maintenance, reclamation and discovery for one daemon.

    Args:
        settings: the daemon's settings.
        store: the state store, for the lease check before a commit (None: no check).
        metrics: where run outcomes are published.
        holder: the lease holder id (None: no lease check).
        spark: a SparkSession to run on (None: in process, or see ``use_spark`` and ``session``).
        clock: the wall clock, an aware UTC datetime.
        use_spark: create a session when a table has work and ``spark`` is None.
        session: where a run that needs Spark gets its session, held for the run
            (:meth:`~maintd.service.spark_driver.SparkDriver.session_for_run`).
        policy_path: the policy file, instead of ``settings.policy.path``.
        progress: called with (table, stage) as a run moves on.
        budget: the maintenance budget shared by every run (None: unlimited).
    """

    def __init__(
        self,
        settings: Settings,
        store: StateStore | None,
        metrics: Metrics,
        *,
        holder: str | None = None,
        spark: Any = None,
        clock: Clock = _utcnow,
        use_spark: bool | None = None,
        policy_path: str | None = None,
        progress: Progress | None = None,
        session: SessionForRun | None = None,
        budget: Budget | None = None,
    ) -> None:
        self.settings = settings
        self.store = store
        self.metrics = metrics
        self.holder = holder
        self.spark = spark
        self.clock = clock
        self._progress = progress
        self.runner = Runner(
            settings,
            policy_path=policy_path,
            spark=spark,
            use_spark=(spark is not None or session is not None) if use_spark is None else use_spark,
            progress=self._on_stage,
            session=session,
            tuned=self.tuned_overrides,
            budget=budget,
        )
        self._commit_started: dict[str, float] = {}
        self._lock = threading.Lock()
        self._discovered: list[str] = []
        self._discovered_at: float | None = None
        self._scans: dict[str, RootScan] = {}
        self.watch = LogWatch()
        self._targets: dict[str, Targets] = {}

    # -- targets ----------------------------------------------------------------------------------------

    def tuned_overrides(self, uri: str) -> dict[str, Any] | None:
        """The knobs the daemon tuned for ``uri`` (:mod:`maintd.service.tuning`), read from the store."""
        if self.store is None or not self.settings.tuning.enabled:
            return None
        try:
            return self.store.tuned_overrides(uri)
        except MaintdError as exc:  # plan with the policy file's knobs rather than not at all
            logger.warning("table {}: tuned knobs not read: {}", uri, exc)
            return None

    def targets_seen(self) -> dict[str, Targets]:
        """The targets of every table planned since the daemon started, by URI (empty ones included)."""
        with self._lock:
            return dict(self._targets)

    def _resolve(self, snapshot: Any, uri: str) -> ResolvedPolicy:
        resolved = self.runner.policy_file.resolve(name=snapshot.metadata.name or "", uri=uri,
                                                   properties=snapshot.metadata.properties,
                                                   tuned=self.tuned_overrides(uri))
        with self._lock:
            self._targets[uri] = resolved.policy.target
        return resolved

    # -- discovery --------------------------------------------------------------------------------------

    def discover(self) -> list[str]:
        """The tables under the warehouse roots, searched again at most every ``discovery_interval_seconds``;
        a root whose last search failed is searched again at every call (every pass), so that it recovers
        as soon as its bucket, credentials or endpoint are fixed. Each search is recorded in the store."""
        wh = self.settings.warehouse
        now = time.monotonic()
        due = self._discovered_at is None or now - self._discovered_at >= wh.discovery_interval_seconds
        roots = list(dict.fromkeys(wh.roots)) if due else [s.root for s in self._scans.values() if not s.ok]
        if roots:
            for scan in discover(roots, wh.discovery_max_depth):
                self._scans[scan.root] = scan
                self._record_scan(scan)
            self._scans = {root: self._scans[root] for root in wh.roots if root in self._scans}
            self._discovered = tables_of(list(self._scans.values()))
            logger.debug("found {} table(s) under {}", len(self._discovered), ", ".join(wh.roots))
        if due:
            self._discovered_at = now
            if self.store is not None:
                self.store.forget_roots(wh.roots)
        return list(self._discovered)

    def root_scans(self) -> list[RootScan]:
        """The last search of every root (empty before the first)."""
        return list(self._scans.values())

    def warehouse_ready(self) -> bool:
        """The readiness check ``warehouse``: fails (raises) when every warehouse root failed its last search
        and no table is registered, the daemon then having nothing to maintain because of a storage error.
        One root failing while others (or explicit tables) are maintained keeps the daemon ready, the root
        being shown in ``/metrics`` and ``maintd status``."""
        scans = self.root_scans()
        if not scans or any(scan.ok for scan in scans):
            return True
        if self.settings.warehouse.tables or (self.store is not None and self.store.list_tables(enabled_only=True)):
            return True
        raise NotReadyError("no table to maintain: every warehouse root failed its search: "
                            + "; ".join(scan.error or scan.root for scan in scans))

    def _record_scan(self, scan: RootScan) -> None:
        if self.store is None:
            return
        try:
            self.store.record_root_scan(scan.root, tables_found=len(scan.tables), error=scan.error,
                                        error_type=scan.error_type, holder=self.holder)
        except MaintdError as exc:
            logger.warning("cannot record the search of warehouse root {}: {}", scan.root, exc)

    # -- maintenance ------------------------------------------------------------------------------------

    def check(self, uri: str) -> bool:
        """Whether ``uri`` must be planned now: one look at its log (see :mod:`maintd.service.checks`)."""
        return self.watch.needs_plan(uri, self.clock()) is not None

    def maintain(self, uri: str) -> RunResult:
        """Plan, execute and commit one table; return the outcome with the table's layout and backlog.

        A plan with nothing to do returns a ``skipped`` result at once (the daemon records no run for it).
        """
        found = self._plan_finds_nothing(uri)
        if found is not None:
            return found
        self.watch.forget(uri)  # the table has work, or its plan failed: plan it again at its next check
        return self.maintain_with_summary(uri)[1]

    def _plan_finds_nothing(self, uri: str) -> RunResult | None:
        """Plan ``uri``; when the plan holds no task, remember what it saw and return the outcome, else None
        (the table has work, or planning failed: the Runner then plans again and reports what happens)."""
        from maintd.planner import next_time_trigger
        from maintd.planner import plan as make_plan

        now = self.clock()
        try:
            table = Table.open(uri, retry=self.runner.retry)
            snapshot = table.snapshot()
            snapshot.check_writable(table.uri)
            resolved = self._resolve(snapshot, table.uri)
            plan = make_plan(snapshot, resolved.policy, now, table.uri, policy_name=resolved.name)
            if plan.tasks:
                return None
            due = next_time_trigger(snapshot, resolved.policy, now)
        except Exception as exc:  # the Runner meets it again, and the run records it
            logger.debug("table {}: planning failed: {}", uri, exc)
            return None
        self.watch.remember(uri, snapshot.version, due, table.storage)
        health = TableHealth.of(snapshot)
        layout = {
            "pins": None,
            "pinned_bytes": None,
            "files": health.files,
            "bytes": health.bytes,
            "levels": {level: {"files": f, "bytes": b} for level, (f, b) in health.by_level.items()},
            **health.layout_measures(),
            "backlog_files": 0,
            "backlog_bytes": 0,
        }
        try:
            from maintd.reclaim import held_by_pins

            live, held = held_by_pins(table, snapshot, now)
            layout.update(pins=len(live), pinned_bytes=held)
        except MaintdError as exc:
            logger.debug("table {}: pins not read: {}", uri, exc)
        metrics = {"outcome": "nothing", "policy": resolved.name, "read_version": snapshot.version,
                   "tasks_planned": 0, "files": health.files, "bytes": health.bytes,
                   "next_time_trigger": due.isoformat() if due else None}
        return RunResult(status=RunStatus.SKIPPED, metrics=metrics, layout=layout)

    def maintain_with_summary(self, uri: str, *, dry_run: bool = False) -> tuple[TableRunSummary, RunResult]:
        """:meth:`maintain`, also returning the runner's summary (what ``maintd run`` prints)."""
        now = self.clock()
        summary = self.runner.run_table(uri, now=now, dry_run=dry_run)
        with self._lock:
            self._commit_started.pop(uri, None)
        status = _STATUS.get(summary.status, RunStatus.FAILED)
        if summary.error_type == LeaseLostError.__name__:
            status = RunStatus.ABANDONED
        layout = self._read_layout(uri, summary, now)
        self._publish_commits(uri, summary)
        result = RunResult(
            status=status,
            plan=_plan_of(summary),
            metrics=_maintenance_metrics(summary, layout),
            decisions=_decisions_of(summary),
            error=summary.error,
            error_type=summary.error_type,
            layout=layout,
        )
        return summary, result

    def _on_stage(self, uri: str, stage: str) -> None:
        """Runner progress: check the lease right before committing; time the commit."""
        if self._progress is not None:
            self._progress(uri, stage)
        if stage == "executing":
            open_run()  # the run has work: the daemon records it from now on
        elif stage == "committing":
            self._check_lease(uri)
            with self._lock:
                self._commit_started[uri] = time.monotonic()
        elif stage in ("done", "failed"):
            with self._lock:
                started = self._commit_started.pop(uri, None)
            if started is not None:
                self.metrics.commit_duration.labels(operation=MAINTENANCE_OPERATION).observe(time.monotonic() - started)

    def _check_lease(self, uri: str) -> None:
        if self.holder is None or self.store is None:
            return
        if not self.store.renew_lease(self.holder, uri, self.settings.store.lease_duration_seconds):
            raise LeaseLostError(
                f"table {uri}: daemon {self.holder} no longer holds the table's lease (it expired, or was released "
                "when the daemon stopped); the rewrite is not committed and its files are left for orphan cleanup"
            )

    def _read_layout(self, uri: str, summary: TableRunSummary, now: datetime) -> dict[str, Any] | None:
        """Files and bytes (in all and per level) and the backlog (what the planner would rewrite now)
        of the table as the run left it; None when the table cannot be read."""
        try:
            table = Table.open(uri)
            snapshot = table.snapshot()
            health = TableHealth.of(snapshot)
        except MaintdError as exc:
            logger.debug("table {}: layout not read: {}", uri, exc)
            return None
        backlog: tuple[int, int] | None = None
        try:
            backlog = self._backlog(table, snapshot, now)
        except MaintdError as exc:  # a broken policy: the layout is still worth showing
            logger.debug("table {}: backlog not read: {}", uri, exc)
        summary.after = health
        pins: tuple[int, int] | None = None
        try:
            from maintd.reclaim import held_by_pins

            live, held = held_by_pins(table, snapshot, now)
            pins = (len(live), held)
        except MaintdError as exc:
            logger.debug("table {}: pins not read: {}", uri, exc)
        return {
            "pins": pins[0] if pins else None,
            "pinned_bytes": pins[1] if pins else None,
            "files": health.files,
            "bytes": health.bytes,
            "levels": {level: {"files": f, "bytes": b} for level, (f, b) in health.by_level.items()},
            **health.layout_measures(),
            "backlog_files": backlog[0] if backlog else None,
            "backlog_bytes": backlog[1] if backlog else None,
        }

    def _backlog(self, table: Table, snapshot: Any, now: datetime) -> tuple[int, int]:
        from maintd.planner import plan as make_plan

        resolved = self._resolve(snapshot, table.uri)
        pending = make_plan(snapshot, resolved.policy, now, table.uri, policy_name=resolved.name)
        return sum(t.input_files for t in pending.tasks), pending.input_bytes

    def _publish_commits(self, uri: str, summary: TableRunSummary) -> None:
        if summary.bytes_written:
            self.metrics.count_rewritten(uri, summary.bytes_written)
        if summary.version is not None:
            self.metrics.commits.labels(operation=MAINTENANCE_OPERATION).inc()
        if summary.commit_retries:
            self.metrics.commit_retries.labels(operation=MAINTENANCE_OPERATION).inc(summary.commit_retries)
        for conflict in summary.conflict_types:
            self.metrics.commit_conflicts.labels(type=conflict).inc()

    # -- reclamation ------------------------------------------------------------------------------------

    def reclaim(self, uri: str, *, dry_run: bool | None = None) -> RunResult:
        """Reclaim one table (expired versions, unreferenced and orphan files); count what was deleted.

        ``dry_run`` None means ``reclaim.dry_run`` of the settings.
        """
        from maintd.reclaim import reclaim_table

        settings = self.settings.reclaim
        dry_run = settings.dry_run if dry_run is None else dry_run
        report = reclaim_table(
            Table.open(uri, retry=self.runner.retry),
            now=self.clock(),
            orphan_grace=timedelta(hours=settings.orphan_grace_hours),
            dry_run=dry_run,
            force_short_grace=settings.force_short_grace,
        )
        metrics = _as_dict(report)
        if not dry_run:
            self._publish_reclaimed(uri, metrics)
        deleted = any(files or size for files, size in reclaimed_by_reason(metrics).values())
        did = deleted or bool(metrics.get("versions_expired"))
        return RunResult(status=RunStatus.SUCCEEDED if did else RunStatus.SKIPPED, metrics={"dry_run": dry_run,
                                                                                             **metrics})

    def _publish_reclaimed(self, uri: str, report: dict[str, Any]) -> None:
        for reason, (files, size) in reclaimed_by_reason(report).items():
            self.metrics.count_reclaimed(uri, reason, files, size)


_DELETED = re.compile(r"(?:(?P<reason>[a-z]+)_)?(?P<what>files|bytes)_deleted")


def reclaimed_by_reason(report: dict[str, Any]) -> dict[str, tuple[int, int]]:
    """Files and bytes a reclamation report says were deleted, by reason.

    Reads the report's numeric ``<reason>_files_deleted`` and ``<reason>_bytes_deleted`` fields
    (``data_files_deleted``, ``orphan_bytes_deleted``...); plain ``files_deleted`` counts under ``all``.
    """
    found: dict[str, list[int]] = {}
    for key, value in report.items():
        match = _DELETED.fullmatch(key)
        if match is None or isinstance(value, bool) or not isinstance(value, int | float):
            continue
        counts = found.setdefault(match["reason"] or "all", [0, 0])
        counts[0 if match["what"] == "files" else 1] += int(value)
    return {reason: (files, size) for reason, (files, size) in found.items()}


def _as_dict(report: Any) -> dict[str, Any]:
    if hasattr(report, "model_dump"):
        return dict(report.model_dump(mode="json"))
    if hasattr(report, "to_dict"):
        return dict(report.to_dict())
    return dict(vars(report))


def _plan_of(summary: TableRunSummary) -> dict[str, Any] | None:
    if not summary.planned:
        return None
    return {"policy": summary.policy, "read_version": summary.read_version, "tasks": summary.planned}


def _maintenance_metrics(summary: TableRunSummary, layout: dict[str, Any] | None) -> dict[str, Any]:
    """What ``maintd status`` and ``maintd history`` show of a maintenance run."""
    return {
        "outcome": summary.status,
        "policy": summary.policy,
        "read_version": summary.read_version,
        "version": summary.version,
        "tasks_planned": summary.tasks_planned,
        "tasks_committed": summary.tasks_committed,
        "tasks_dropped": summary.tasks_dropped,
        "tasks_failed": summary.tasks_failed,
        "conflicts": summary.conflicts,
        "conflict_types": list(summary.conflict_types),
        "commit_retries": summary.commit_retries,
        "bytes_read": summary.bytes_read,
        "bytes_written": summary.bytes_written,
        "files_before": summary.before.files,
        "bytes_before": summary.before.bytes,
        "files": summary.after.files,
        "bytes": summary.after.bytes,
        "levels": {level: {"files": f, "bytes": b} for level, (f, b) in summary.after.by_level.items()},
        **summary.after.layout_measures(),
        "backlog_files": layout["backlog_files"] if layout else None,
        "backlog_bytes": layout["backlog_bytes"] if layout else None,
        "seconds": summary.seconds,
        "engine": summary.engine,
        "spark_master": summary.spark_master,
        "spark_app_id": summary.spark_app_id,
        "spark_tasks": summary.spark_tasks,
        "spark_retries": summary.spark_retries,
        "commits": list(summary.commits),
    }


def _decisions_of(summary: TableRunSummary) -> tuple[Decision, ...]:
    """The per-bucket decisions of a run that planned work; a run with nothing to do stores none,
    which keeps the store from growing by one row per bucket every few minutes."""
    if not summary.tasks_planned:
        return ()
    return tuple(
        Decision(
            partition=_partition_text(d.get("partition") or {}),
            bucket=d.get("bucket"),
            action=str(d.get("action")),
            rule=str(d.get("rule")),
            message=str(d.get("message")),
        )
        for d in summary.decisions
    )


def _partition_text(partition: dict[str, Any]) -> str:
    return "/".join(f"{key}={value}" for key, value in partition.items())


def spark_ready(spark: Any) -> bool:
    """Whether the SparkSession still answers: its JVM context is running (or Spark Connect replies)."""
    if type(spark).__module__.startswith("pyspark.sql.connect"):
        return bool(spark.range(1).count() == 1)
    return not spark.sparkContext._jsc.sc().isStopped()


__all__ = ["TableJobs", "reclaimed_by_reason", "spark_ready"]
