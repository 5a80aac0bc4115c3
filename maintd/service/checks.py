"""Checks of tables that cost one look at the log, and their counters kept in memory, written in place.

The daemon checks every table it owns once per maintenance interval. Most tables have not changed since
the last check, and the planner is pure (:func:`maintd.planner.plan` of the same snapshot and policy
changes only with ``now``), so a check needs to plan only when the table changed or when a time trigger
of its last plan comes due (:func:`maintd.planner.next_time_trigger`). :class:`LogWatch` remembers, for
every table whose last plan found nothing, the version it planned from and that moment. A check then
costs one look at the log and nothing else:

- on a store that lists in lexical order (object stores), one LIST of the first names of ``_log/``, whose
  first commit name is the newest version (:meth:`~maintd.table.log.tablelog.TableLog.latest_version`).
- elsewhere (a local disk), versions are dense, so one ``stat`` of the commit after the version seen tells
  whether anything was committed since.

A table not seen yet, seen failing, or whose last plan had work is planned at its next check.

:class:`CheckLedger` counts the checks of every table in memory and hands them to the store once per
pass (:meth:`~maintd.service.store.StateStore.record_checks`), which adds them onto the table's row: a
check that finds nothing writes no run, so the store grows with the work done, not with the checks.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from maintd.service.records import CheckRecord, RunKind
from maintd.storage import Storage, storage_for_uri
from maintd.table.log.tablelog import TableLog, commit_path

#: Why a check plans: the table was never planned by this replica, its log moved, or a time trigger is due.
UNKNOWN, CHANGED, DUE = "unknown", "changed", "due"


@dataclass(slots=True)
class _Seen:
    version: int
    due: datetime | None
    storage: Storage


class LogWatch:
    """What the last plan that found nothing saw of each table, and the cheap look that tells if it still holds.

    Thread-safe: the pass checks while table threads remember what they planned.
    """

    def __init__(self) -> None:
        self._seen: dict[str, _Seen] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._seen)

    def remember(self, uri: str, version: int, due: datetime | None, storage: Storage | None = None) -> None:
        """The plan of ``uri`` at ``version`` found nothing; it needs planning again from ``due`` (None: only
        once the table changes)."""
        with self._lock:
            self._seen[uri] = _Seen(version, due, storage or storage_for_uri(uri))

    def forget(self, uri: str) -> None:
        """Plan ``uri`` at its next check (it had work, failed, or is no longer this replica's)."""
        with self._lock:
            self._seen.pop(uri, None)

    def keep_only(self, uris: set[str]) -> None:
        """Forget every table not in ``uris`` (unregistered, disabled, or handed to another replica)."""
        with self._lock:
            for uri in [u for u in self._seen if u not in uris]:
                del self._seen[uri]

    def needs_plan(self, uri: str, now: datetime) -> str | None:
        """Why ``uri`` must be planned now (:data:`UNKNOWN`, :data:`CHANGED`, :data:`DUE`), or None when its
        last plan still holds. Costs one look at the log, none when a time trigger is due.

        A look that fails (the storage is unreachable) answers :data:`CHANGED`: the plan then meets the error
        and the run records it.
        """
        with self._lock:
            seen = self._seen.get(uri)
        if seen is None:
            return UNKNOWN
        if seen.due is not None and now >= seen.due:
            return DUE
        try:
            return CHANGED if _moved(seen.storage, seen.version) else None
        except Exception:
            return CHANGED


def _moved(storage: Storage, version: int) -> bool:
    """Whether a version after ``version`` was committed: one LIST (lexically listing stores) or one stat."""
    if storage.lists_in_order:
        return TableLog(storage).latest_version() != version
    return storage.exists(commit_path(version + 1))


@dataclass(slots=True)
class _Counts:
    checks: int = 0
    planned: int = 0
    checked_at: datetime | None = None
    found_nothing: bool = False
    layout: dict[str, Any] | None = None


class CheckLedger:
    """Checks counted in memory per table and kind until :meth:`drain` hands them to the store.

    Also keeps, per table, when it was last checked (monotonic), for the check lag of ``/metrics``.
    """

    def __init__(self) -> None:
        self._pending: dict[tuple[str, RunKind], _Counts] = {}
        self._last: dict[str, float] = {}
        self._lock = threading.Lock()

    def checked(self, uri: str, at: datetime, *, planned: bool = False) -> None:
        """A maintenance check of ``uri``; ``planned`` when it went on to plan."""
        with self._lock:
            counts = self._pending.setdefault((uri, RunKind.MAINTENANCE), _Counts())
            counts.checks += 1
            counts.planned += int(planned)
            counts.checked_at = at
            if not planned:
                counts.found_nothing = True
            self._last[uri] = time.monotonic()

    def found_nothing(self, uri: str, kind: RunKind, at: datetime, layout: dict[str, Any] | None) -> None:
        """A run of ``kind`` planned (or looked) and found nothing to do: no run is recorded, the table's row
        says it was maintained then."""
        with self._lock:
            counts = self._pending.setdefault((uri, kind), _Counts())
            counts.checked_at = counts.checked_at or at
            counts.found_nothing = True
            if layout is not None:
                counts.layout = layout

    def ran(self, uri: str, kind: RunKind) -> None:
        """A run of ``kind`` was recorded (it did something, failed or was abandoned): what was pending must not
        count as its last success, nor clear the failures that run recorded."""
        with self._lock:
            counts = self._pending.get((uri, kind))
            if counts is not None:
                counts.found_nothing = False
                counts.layout = None

    def drain(self) -> list[CheckRecord]:
        """The checks counted since the last drain, forgotten here."""
        with self._lock:
            pending, self._pending = self._pending, {}
        return [
            CheckRecord(uri=uri, kind=kind, checked_at=c.checked_at, checks=c.checks, planned=c.planned,
                        found_nothing=c.found_nothing, layout=c.layout)
            for (uri, kind), c in pending.items()
            if c.checked_at is not None
        ]

    def restore(self, records: list[CheckRecord]) -> None:
        """Put drained checks back (the store could not take them): they are written with the next drain."""
        with self._lock:
            for r in records:
                counts = self._pending.setdefault((r.uri, r.kind), _Counts())
                counts.checks += r.checks
                counts.planned += r.planned
                counts.checked_at = max(filter(None, (counts.checked_at, r.checked_at)))
                counts.found_nothing = counts.found_nothing or r.found_nothing
                counts.layout = counts.layout or r.layout

    def oldest_check_age(self, uris: set[str]) -> float | None:
        """Seconds since the least recently checked of ``uris`` was checked (None: none checked yet)."""
        now = time.monotonic()
        with self._lock:
            ages = [now - self._last[u] for u in uris if u in self._last]
        return max(ages) if ages else None


__all__ = ["CHANGED", "DUE", "UNKNOWN", "CheckLedger", "LogWatch"]
