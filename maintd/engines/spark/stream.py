"""``spark.readStream.format("maintd").option("readChangeFeed", "true")``: the change feed as a stream.

An offset is ``{"version": v}``: every version up to ``v`` has been served. A micro-batch from offset
``a`` to ``b`` serves the net changes of versions ``a+1 .. b`` (``Table.changes(a, b)``), one Spark
partition per touched bucket, as the batch change feed does (:class:`~maintd.engines.spark.read.ChangeFeedReader`).
Spark keeps the offsets in the query's checkpoint, so a restarted query resumes after the last batch it
committed; maintenance commits change no rows and add nothing to a batch.

Where the stream starts: ``startingVersion`` (inclusive, as Delta's) or ``startingTimestamp`` (the first
version committed at or after it); without either, the versions committed after the query starts.
``maxFilesPerTrigger`` and ``maxBytesPerTrigger`` bound a micro-batch by the data files (and their bytes)
that writers' commits added: whole versions are taken until the next would pass a bound, and always at
least one. A batch whose versions reclamation expired meanwhile fails naming the oldest retained version.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxFiles,
    SupportsTriggerAvailableNow,
)

from maintd.engines.spark.carry import carried_storage
from maintd.engines.spark.read import BATCH_ROWS, change_schema
from maintd.storage import executor_storage
from maintd.table import AddFile, Snapshot, Table
from maintd.table.log.actions import Metadata, Protocol
from maintd.table.read.scan import ChangeUnit, plan_changes, read_change_unit


@dataclass(frozen=True)
class Bounds:
    """What one micro-batch may take (None: no bound)."""

    max_files: int | None = None
    max_bytes: int | None = None


@dataclass
class _ChangePartition(InputPartition):
    """One bucket's changes between two versions."""

    start: int
    end: int
    unit: ChangeUnit


class ChangeFeedStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Serves the change feed of a table from ``first`` on (see the module docstring)."""

    def __init__(self, uri: str, first: int, protocol: Protocol, metadata: Metadata, columns: Sequence[str],
                 nullable: Sequence[bool] | None, bounds: Bounds) -> None:
        self.uri, self.first, self.protocol, self.metadata = uri, first, protocol, metadata
        self.carried = carried_storage(uri)  # as the batch readers: credentials only as the session says
        self.columns = tuple(columns)
        schema = change_schema(metadata, self.columns)
        self.arrow_schema = schema if nullable is None else pa.schema(
            [f.with_nullable(n) for f, n in zip(schema, nullable, strict=True)])
        self.bounds = bounds
        self.target: int | None = None
        """The latest version when Trigger.AvailableNow started: nothing later is served."""

    def initialOffset(self) -> dict[str, int]:
        return {"version": self.first - 1}

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.bounds.max_files is not None:
            return ReadMaxFiles(self.bounds.max_files)
        if self.bounds.max_bytes is not None:
            return ReadMaxBytes(self.bounds.max_bytes)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self.target = Table.open(self.uri).version

    def reportLatestOffset(self) -> dict[str, int]:
        return {"version": Table.open(self.uri).version}

    def latestOffset(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:
        table = Table.open(self.uri)
        latest = table.version if self.target is None else self.target
        done = int(start["version"])
        if latest <= done:
            return {"version": done}
        bounds = self._bounds(limit)
        if bounds.max_files is None and bounds.max_bytes is None:
            return {"version": latest}
        files = size = 0
        end = done
        for v in range(done + 1, latest + 1):
            adds = [a for a in table.log.read_commit(v) or [] if isinstance(a, AddFile) and a.data_change]
            more, grown = files + len(adds), size + sum(a.bytes for a in adds)
            if files and self._over(bounds, more, grown):
                break  # this version would pass a bound: the next batch starts with it
            files, size, end = more, grown, v  # a version adding nothing (maintenance) rides along
            if self._over(bounds, files, size):
                break
        return {"version": end}

    def _bounds(self, limit: ReadLimit) -> Bounds:
        """The bounds of ``limit`` (Spark's, which may differ from the options': a trigger that takes everything),
        with the other option's bound when both options were given."""
        if isinstance(limit, ReadAllAvailable):
            return Bounds()
        if isinstance(limit, ReadMaxFiles):
            return Bounds(limit.max_files, self.bounds.max_bytes)
        if isinstance(limit, ReadMaxBytes):
            return Bounds(self.bounds.max_files, limit.max_bytes)
        return self.bounds

    @staticmethod
    def _over(bounds: Bounds, files: int, size: int) -> bool:
        return ((bounds.max_files is not None and files > bounds.max_files)
                or (bounds.max_bytes is not None and size > bounds.max_bytes))

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> Sequence[InputPartition]:
        a, b = int(start["version"]), int(end["version"])
        if b <= a:
            return []
        table = Table.open(self.uri)
        before = table.resolve_version(max(a, 0))  # checked against retention: an expired start fails, naming it
        r = table.change_inputs(before, table.resolve_version(b))
        units = plan_changes(r.before, r.after, r.groups, r.changed, table.snapshot().priors.values())
        return [_ChangePartition(a, b, u) for u in units]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, _ChangePartition):
            return
        before = Snapshot(version=partition.start, timestamp=0, protocol=self.protocol, metadata=self.metadata,
                          files={})
        after = Snapshot(version=partition.end, timestamp=0, protocol=self.protocol, metadata=self.metadata, files={})
        t = read_change_unit(executor_storage(self.uri, self.carried), before, after, partition.unit)
        yield from t.select(list(self.columns)).cast(self.arrow_schema).to_batches(max_chunksize=BATCH_ROWS)

    def commit(self, end: dict[str, int]) -> None:
        """Nothing to release: the offsets live in the query's checkpoint."""


__all__ = ["Bounds", "ChangeFeedStreamReader"]
