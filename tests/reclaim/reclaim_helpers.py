"""Helpers of the reclamation tests: tables with a known history at known times, and what must survive.

Every table here is written under frozen time, so that the commit time of each version is known to the
millisecond; the reads of every version are taken as it is committed, before any reclamation, and are
what ``read(version=v)`` must still return for every retained ``v`` afterwards.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.acero  # imported before freezegun swaps datetime.date, which pyarrow checks on import
import pyarrow.compute
import pyarrow.dataset
import pyarrow.parquet
from freezegun import freeze_time

from maintd import Table

T0 = datetime(2026, 1, 5, 8, 0, tzinfo=UTC)
SCHEMA = "id:int64!,name:string,ds:string"


def rows(t: pa.Table) -> list[dict[str, Any]]:
    """The rows of a read, sorted by key (``ds`` where the table has it, then ``id``)."""
    t = t.select([c for c in ("ds", "id", "name") if c in t.column_names])
    return sorted(t.to_pylist(), key=lambda r: (r.get("ds") or "", r["id"]))


@dataclass
class History:
    """A table, the time of each version, and the rows each version showed when it was the latest."""

    table: Table
    times: dict[int, datetime] = field(default_factory=dict)
    reads: dict[int, list[dict[str, Any]]] = field(default_factory=dict)

    @property
    def latest(self) -> int:
        return max(self.times)

    def oldest_retained(self, now: datetime, retain_hours: int) -> int:
        """The version current at ``now - retain_hours`` (the newest committed at or before it; version 0 if
        none was), so every moment of the window stays readable; the latest when the retention is 0."""
        if retain_hours == 0:
            return self.latest
        cutoff = now - timedelta(hours=retain_hours)
        return max((v for v, t in self.times.items() if t <= cutoff), default=0)

    def live_from(self, version: int) -> set[str]:
        """Every data file some version from ``version`` to the latest reads."""
        return set().union(*(self.table.snapshot(v).files for v in range(version, self.latest + 1)))


def op(table: Table, i: int) -> int:
    """The i-th write of a test history: upserts into two partitions, deletes, and partition overwrites."""
    if i % 5 == 4:
        return table.overwrite(pa.table({"id": [i, i + 1000], "name": [f"o{i}", "x"], "ds": ["a", "a"]}),
                               partition={"ds": "a"})
    if i % 5 == 3:
        return table.delete(pa.table({"id": [i - 1], "ds": ["b"]}))
    return table.upsert(pa.table({"id": [i % 7, i], "name": [f"n{i}", f"m{i}"], "ds": ["a", "b"]}))


def build(root: Path, gaps: Sequence[timedelta], *, retain_hours: int = 24, start: datetime = T0,
          interval: int = 10) -> History:
    """Create a table at ``start``, then commit one write per gap, each ``gap`` after the previous commit."""
    with freeze_time(start) as clock:
        table = Table.create(str(root), SCHEMA, primary_key="id", partition_by="ds", buckets=2,
                             properties={"acid.data.retain.hours": retain_hours, "log.checkpoint.interval": interval})
        history = History(table, {0: start}, {0: []})
        for i, gap in enumerate(gaps):
            clock.tick(gap)
            v = op(table, i)
            history.times[v] = datetime.now(UTC)
            history.reads[v] = rows(table.read())
    return history


def data_files_on_disk(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*.parquet") if "_log" not in p.parts}


def age(path: Path, now: datetime, hours: float) -> None:
    """Set a file's modification time to ``hours`` before ``now``."""
    t = (now - timedelta(hours=hours)).timestamp()
    os.utime(path, (t, t))


def orphan(root: Path, now: datetime, hours: float, name: str = "a" * 32, where: str = "ds=a/bucket-00000") -> Path:
    """A data file no commit references (a crashed writer's), last modified ``hours`` before ``now``."""
    path = root / where / f"delta-L0-{name}.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"PAR1 left by a writer that crashed before its commit")
    age(path, now, hours)
    return path


@contextmanager
def local_time_zone(tz: str) -> Iterator[None]:
    """The process's local time zone is ``tz`` (a ``TZ`` value) inside the block: naive local times then differ
    from UTC, as on a machine whose clock is not set to UTC."""
    old = os.environ.get("TZ")
    os.environ["TZ"] = tz
    time.tzset()
    try:
        yield
    finally:
        if old is None:
            del os.environ["TZ"]
        else:
            os.environ["TZ"] = old
        time.tzset()


class Clock:
    """A ``time`` module whose monotonic clock stands still until told to move (the rest is the real one)."""

    def __init__(self) -> None:
        self.now = 100.0

    def monotonic(self) -> float:
        return self.now

    def __getattr__(self, name: str) -> object:
        return getattr(time, name)
