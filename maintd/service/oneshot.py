"""``maintd run`` under the same rules as the daemon: one runner per table, every run recorded.

With a state store (``store.url`` configured, or the default SQLite file of a local daemon present),
each table is maintained only under its lease, exactly as a daemon replica does. A table whose lease
another holder (a daemon, another ``maintd run``) has is skipped and reported, never maintained twice at
once. The lease is renewed while the run lasts and checked right before the commit; the maintenance run
and the reclamation that follows are recorded in the store (``maintd status``, ``maintd history``, the
table gauges of ``/metrics``), and a failure puts the table into the same backoff a daemon's would.

Without a store, and with ``--dry-run`` (which changes nothing), no lease is taken and nothing recorded.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loguru import logger
from sqlalchemy.engine import make_url

from maintd.errors import MaintdError
from maintd.execution.runner import Progress, TableHealth, TableRunSummary
from maintd.service.daemon import default_holder
from maintd.service.jobs import TableJobs
from maintd.service.jvm_logging import with_jvm_logging
from maintd.service.metrics import Metrics
from maintd.service.recording import record_failure, record_finished
from maintd.service.records import RunKind, RunResult, RunStatus
from maintd.service.run_log import log_run, run_context
from maintd.service.store import StateStore, open_store
from maintd.settings import Settings
from maintd.table import Table


@dataclass
class TableOutcome:
    """What ``maintd run`` did to one table."""

    uri: str
    summary: TableRunSummary | None = None
    """The runner's summary; None when the table was skipped."""
    run_id: int | None = None
    """The maintenance run recorded in the store (None without a store, or on a dry run)."""
    reclaim_run_id: int | None = None
    leased_by: str | None = None
    """The holder of the table's lease when the table was skipped for it."""

    @property
    def skipped(self) -> bool:
        return self.leased_by is not None

    @property
    def ok(self) -> bool:
        """Skipped (another holder maintains the table) or maintained without a failure."""
        return self.skipped or (self.summary is not None and self.summary.ok)

    def to_dict(self) -> dict[str, Any]:
        if self.summary is None:
            return {"uri": self.uri, "status": "skipped", "leased_by": self.leased_by}
        return {**self.summary.to_dict(), "run_id": self.run_id, "reclaim_run_id": self.reclaim_run_id}


def store_for_run(settings: Settings) -> StateStore | None:
    """The state store ``maintd run`` records in: a configured ``store.url``, or the default SQLite file if a
    local daemon created it; None when there is neither (then nothing is leased or recorded)."""
    default = f"sqlite:///{settings.state_dir.expanduser() / 'maintd.db'}"
    if settings.store.url == default:
        database = make_url(default).database
        if not database or not Path(database).is_file():
            return None
    return open_store(settings, upgrade=settings.store.migrate_on_start)


class OneShot:
    """Maintains tables once, each under its lease when there is a store (see the module docstring).

    Args:
        settings: the settings (the driver's logs configured from ``logging`` when a session starts).
        store: where leases and runs live; None takes no lease and records nothing.
        policy_path: the policy file instead of ``policy.path``.
        reclaim: reclaim each table after its maintenance.
        progress: called with (table, stage) as a run moves on.
        holder: the lease holder id (default ``maintd-run@<pod or host>:<pid>``).
    """

    def __init__(
        self,
        settings: Settings,
        store: StateStore | None,
        *,
        policy_path: str | None = None,
        reclaim: bool = True,
        progress: Progress | None = None,
        holder: str | None = None,
    ) -> None:
        self.settings = settings
        self.store = store
        self.holder = holder or f"maintd-run@{default_holder()}"
        self.reclaim = reclaim
        self.jobs = TableJobs(
            with_jvm_logging(settings),
            store,
            Metrics(),
            holder=self.holder if store is not None else None,
            use_spark=True,
            policy_path=policy_path,
            progress=progress,
        )

    def run(self, uris: Sequence[str], *, dry_run: bool = False) -> list[TableOutcome]:
        """Maintain (and reclaim) every table in turn; one table's failure never stops the others."""
        return [self.run_table(uri, dry_run=dry_run) for uri in uris]

    def run_table(self, uri: str, *, dry_run: bool = False) -> TableOutcome:
        if self.store is None or dry_run:
            return self._maintain_unrecorded(uri, dry_run)
        duration = self.settings.store.lease_duration_seconds
        if not self.store.acquire_leases(self.holder, [uri], duration, 1):
            holder = self.store.lease_holders().get(uri, "another holder")
            logger.warning("table {}: skipped, its lease is held by {} (it is maintained there)", uri, holder)
            return TableOutcome(uri, leased_by=holder)
        renewal = _Renewal(self.store, self.holder, uri, duration, self.settings.store.lease_renew_interval_seconds)
        try:
            outcome = self._maintain(uri)
            if outcome.summary is not None:
                outcome.reclaim_run_id = self._reclaim(uri, outcome.summary, self.store, dry_run)
            return outcome
        finally:
            renewal.stop()
            try:
                self.store.release_lease(self.holder, uri)
            except MaintdError as exc:
                logger.warning("cannot release the lease of {}: {} (it will expire)", uri, exc)

    def _maintain_unrecorded(self, uri: str, dry_run: bool) -> TableOutcome:
        started = time.monotonic()
        with run_context(uri, None, RunKind.MAINTENANCE.value):
            summary, result = self.jobs.maintain_with_summary(uri, dry_run=dry_run)
            log_run(RunKind.MAINTENANCE.value, uri, None, result.status.value, time.monotonic() - started,
                    result.metrics, error=result.error)
        self._reclaim(uri, summary, None, dry_run)
        return TableOutcome(uri, summary)

    def _maintain(self, uri: str) -> TableOutcome:
        assert self.store is not None
        started = time.monotonic()
        run_id = self.store.start_run(uri, RunKind.MAINTENANCE, holder=self.holder)
        with run_context(uri, run_id, RunKind.MAINTENANCE.value):
            summary, result = self.jobs.maintain_with_summary(uri)
            self.store.record_decisions(run_id, result.decisions)
            self._record(uri, RunKind.MAINTENANCE, run_id, result, time.monotonic() - started)
        return TableOutcome(uri, summary, run_id=run_id)

    def _reclaim(self, uri: str, summary: TableRunSummary, store: StateStore | None, dry_run: bool) -> int | None:
        """Reclaim after maintenance: the files maintenance just replaced go once their retention expired."""
        if not self.reclaim or summary.status == "failed":
            return None
        started = time.monotonic()
        run_id = store.start_run(uri, RunKind.RECLAIM, holder=self.holder) if store else None
        with run_context(uri, run_id, RunKind.RECLAIM.value):
            try:
                result = self.jobs.reclaim(uri, dry_run=dry_run)
            except MaintdError as exc:
                summary.reclamation_failed(exc)
                result = RunResult(status=RunStatus.FAILED, error=f"{type(exc).__name__}: {exc}")
            if store is not None and run_id is not None:
                self._record(uri, RunKind.RECLAIM, run_id, result, time.monotonic() - started)
            elif result.status is not RunStatus.FAILED:
                log_run(RunKind.RECLAIM.value, uri, None, result.status.value, time.monotonic() - started,
                        result.metrics)
        if result.status is not RunStatus.FAILED:
            summary.reclaim = result.metrics
            if not dry_run:
                summary.after = TableHealth.of(Table.open(uri).snapshot())
        return run_id

    def _record(self, uri: str, kind: RunKind, run_id: int, result: RunResult, seconds: float) -> None:
        assert self.store is not None
        if result.status is RunStatus.FAILED:
            record_failure(self.store, self.settings.scheduler, uri, kind, run_id, result.error or "failed", seconds,
                           result=result)
        else:
            record_finished(self.store, uri, kind, run_id, result, seconds)


class _Renewal:
    """Renews one lease in the background while a run lasts (the commit checks it once more)."""

    def __init__(self, store: StateStore, holder: str, uri: str, duration: float, interval: float) -> None:
        self._done = threading.Event()
        renew: Callable[[], bool] = lambda: store.renew_lease(holder, uri, duration)  # noqa: E731

        def _loop() -> None:
            while not self._done.wait(interval):
                try:
                    if not renew():
                        logger.error("lost the lease of {} while maintaining it; its commit will be abandoned", uri)
                        return
                except MaintdError as exc:
                    logger.error("cannot renew the lease of {}: {}", uri, exc)

        self._thread = threading.Thread(target=_loop, name="maintd-lease-renewal", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._done.set()
        self._thread.join(timeout=10)


__all__ = ["OneShot", "TableOutcome", "store_for_run"]
