"""Recording the end of a run in the state store, the same way for the daemon and ``maintd run``.

A run that succeeded (or had nothing to do) stores its metrics, plan and the table's layout, and resets
the table's failures of its kind. A failed run increments them and sets when the table may be retried:
an exponential backoff (``scheduler.retry_backoff_base_seconds``, doubling per failure in a row, at most
``retry_backoff_max_seconds``), so the daemon leaves a failing table alone for a while whoever ran it.
Either way the run's one summary line is logged (:mod:`maintd.service.run_log`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from contextvars import ContextVar
from datetime import timedelta

from loguru import logger

from maintd.service.records import RunKind, RunResult, RunStatus
from maintd.service.run_log import log_run
from maintd.service.store import StateStore
from maintd.settings import SchedulerSettings


class RunRow:
    """The row of one daemon run, written only once the run has something to show.

    A look at a table that finds nothing to do is no run: the daemon counts it on the table's row instead
    (:mod:`maintd.service.checks`). The work calls :func:`open_run` when it starts executing a plan, and the
    daemon opens the row at the end of any run that did something, failed or was refused; its start is dated
    back to when the run began.
    """

    def __init__(self, store: StateStore, uri: str, kind: RunKind, holder: str | None) -> None:
        self.store, self.uri, self.kind, self.holder = store, uri, kind, holder
        self.run_id: int | None = None
        self.started = time.monotonic()
        self._bound = ExitStack()
        self._thread = threading.get_ident()
        self._lock = threading.Lock()

    def open(self) -> int:
        """The run's id, its row written now if it was not yet (every later log record of the run's thread
        carries the id). Any thread may open it: the daemon opens the rows of runs it abandons on stop."""
        with self._lock:
            if self.run_id is None:
                self.run_id = self.store.start_run(self.uri, self.kind, holder=self.holder,
                                                   seconds_ago=time.monotonic() - self.started)
                if threading.get_ident() == self._thread:
                    self._bound.enter_context(logger.contextualize(run_id=self.run_id))
            return self.run_id

    @contextmanager
    def current(self) -> Iterator[RunRow]:
        """Make this the row :func:`open_run` opens in this thread meanwhile."""
        token = _CURRENT.set(self)
        try:
            yield self
        finally:
            _CURRENT.reset(token)
            self._bound.close()


_CURRENT: ContextVar[RunRow | None] = ContextVar("maintd_run_row", default=None)


def open_run() -> int | None:
    """Write the row of the daemon run this thread is in (it starts doing work); None outside a daemon run."""
    row = _CURRENT.get()
    return None if row is None else row.open()


def backoff_seconds(scheduler: SchedulerSettings, failures: int) -> float:
    """Delay before retrying a table after ``failures`` consecutive failures (exponential, bounded)."""
    delay = scheduler.retry_backoff_base_seconds * 2 ** max(0, failures - 1)
    return float(min(scheduler.retry_backoff_max_seconds, delay))


def record_finished(
    store: StateStore, uri: str, kind: RunKind, run_id: int, result: RunResult, seconds: float
) -> None:
    """Store a run that did not fail (succeeded, skipped, abandoned) and log its summary line."""
    store.finish_run(
        run_id, result.status, metrics=result.metrics, plan=result.plan, error=result.error, layout=result.layout
    )
    log_run(kind.value, uri, run_id, result.status.value, seconds, result.metrics, error=result.error)


def record_failure(
    store: StateStore,
    scheduler: SchedulerSettings,
    uri: str,
    kind: RunKind,
    run_id: int | None,
    error: str,
    seconds: float,
    *,
    result: RunResult | None = None,
    exc: BaseException | None = None,
) -> float:
    """Store a failed run with its retry time (if it was recorded at all) and log its summary line.

    Returns:
        The backoff before the table is retried, in seconds.
    """
    table = store.get_table(uri)
    failures = (table.failures(kind) if table else 0) + 1
    delay = backoff_seconds(scheduler, failures)
    log_run(kind.value, uri, run_id, RunStatus.FAILED.value, seconds, result.metrics if result else None,
            error=error, note=f" ({failures} in a row; retrying in {delay:.0f} s)", exc=exc)
    if run_id is not None:
        store.finish_run(
            run_id,
            RunStatus.FAILED,
            error=error,
            retry_after=store.db_now() + timedelta(seconds=delay),
            metrics=result.metrics if result else None,
            plan=result.plan if result else None,
            layout=result.layout if result else None,
        )
    return delay


__all__ = ["RunRow", "backoff_seconds", "open_run", "record_failure", "record_finished"]
