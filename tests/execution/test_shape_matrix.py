"""The shape matrix: every named shape of ``tests/shapes.py`` (at least 20), maintained by maintd's own planner,
execution and commit, in process and on Spark, checked against the oracle after every step.

One scenario per (shape, engine): writes of upserts, deletes, mixed changes and a partition overwrite; clustering
(level 0 -> 1) planned by the real planner; compactions in three execution modes (whole units, key ranges of a
few kilobytes, key ranges that merge through spilled runs) into BaseFiles of a few kilobytes, so that later ones
rewrite several and split at their bounds; more writes between; reclamation with a clock past the retention.
After each step every version still retained reads as the oracle says (time travel), the change feed between
retained versions equals the oracle's net change, and after reclamation the expired versions are gone and nothing
a retained version reads was deleted.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from shapes import MATRIX, Oracle, Shape

from maintd import Table, VersionNotFoundError
from maintd.execution import ExecutionOptions, run_plan
from maintd.planner import default_policy, plan, with_overrides
from maintd.reclaim import reclaim_table

CLUSTER = with_overrides(default_policy(), {"clustering": {"level1": {"min_files": 2}},
                                            "compaction": {"enabled": False}})
COMPACT = with_overrides(default_policy(), {"clustering": {"enabled": False},
                                            "compaction": {"max_delta_files": 1, "min_interval_hours": 0,
                                                           "target_file_bytes": 6_000}})
MODES = {"whole": ExecutionOptions(),
         "key ranges": ExecutionOptions(task_input_bytes=3_000),
         "key ranges, spilled": ExecutionOptions(task_input_bytes=3_000, task_memory_bytes=40_000)}
KEYS = 48


class Scenario:
    """One table of ``shape``, its oracle, and the maintenance engine (``spark`` None: in process)."""

    def __init__(self, shape: Shape, root: Path, spark: Any, seed: int) -> None:
        self.shape = shape
        self.table = shape.create(str(root / "t"), **{"acid.data.retain.hours": 1, "log.checkpoint.interval": 4})
        self.oracle = Oracle(shape)
        self.spark = spark
        self.rng = np.random.default_rng(seed)
        self.writes = 0
        self.oldest = 0

    # -- writes ---------------------------------------------------------------------------------------------------
    def write(self, n: int = 3) -> None:
        for _ in range(n):
            self.writes += 1
            tag = f"w{self.writes}"
            keys = self.rng.integers(0, KEYS, int(self.rng.integers(4, 14)))
            roll = self.rng.random()
            if roll < 0.45:
                rows = self.shape.rows(self.rng, keys, tag)
                self.oracle.upsert(self.table.upsert(self.shape.batch(rows)), rows)
            elif roll < 0.65:
                gone = self.shape.keys_only(self.shape.rows(self.rng, keys, tag))
                self.oracle.delete(self.table.delete(self.shape.batch(gone, self.shape.identity_columns)), gone)
            elif roll < 0.9:
                rows = self.shape.rows(self.rng, keys, tag)
                ops = [int(o) for o in self.rng.integers(0, 2, len(rows))]
                batch = self.shape.batch(rows).append_column("op", pa.array(ops, pa.int8()))
                self.oracle.changes(self.table.write_changes(batch, "op"), rows, ops)
            else:
                self.overwrite(tag)

    def overwrite(self, tag: str) -> None:
        rows = self.shape.rows(self.rng, self.rng.integers(0, KEYS, 6), tag)
        if self.shape.partition_by:
            spec = {c: rows[0][c] for c in self.shape.partition_by}
            rows = [r for r in rows if all(r[c] == v for c, v in spec.items())]
            self.oracle.overwrite(self.table.overwrite(self.shape.batch(rows), partition=spec), rows, spec)
        else:
            self.oracle.overwrite(self.table.overwrite(self.shape.batch(rows)), rows, None)

    # -- maintenance ----------------------------------------------------------------------------------------------
    def maintain(self, policy: Any, options: ExecutionOptions) -> int:
        """Plan with the real planner, execute and commit; returns the tasks committed."""
        snap = self.table.snapshot()
        made = plan(snap, policy, datetime.now(UTC), self.table.uri)
        if not made.tasks:
            return 0
        opts = options.model_copy(update={"in_process_max_bytes": 0 if self.spark is not None else 1 << 40})
        report = run_plan(made, self.table, self.spark, opts, commit=True)
        failed = [r.error for r in report.results if not r.ok]
        assert not failed, f"{self.shape.describe()}: tasks failed: {failed}"
        assert report.outcome is not None and report.outcome.version is not None, report.outcome
        assert report.engine == ("spark" if self.spark is not None else "in-process"), report.engine
        for v in report.outcome.versions:
            self.oracle.unchanged(v)
        return len(report.outcome.committed)

    def reclaim(self) -> None:
        """Reclamation with a clock past the retention: every version older than the latest expires."""
        report = reclaim_table(self.table, now=datetime.now(UTC) + timedelta(hours=2), orphan_grace=timedelta(0),
                               force_short_grace=True)
        self.oldest = report.oldest_retained_version
        latest = self.table.version
        self.oracle.unchanged(latest)
        with pytest.raises(VersionNotFoundError):
            self.table.read(version=self.oldest - 1)
        needed = set().union(*(self.table.snapshot(v).files for v in range(self.oldest, latest + 1)))
        # a prior-rows file goes with its BaseFiles (docs/format.md, "Prior rows"): kept while every one of them
        # is, since a looked-up one goes with the first of them that a commit removes (a compaction removes all
        # of its own file's at once)
        needed |= {p.path for p in self.table.snapshot().priors.values() if set(p.of) <= needed}
        on_disk = {f.path for f in self.table.storage.walk() if not f.path.startswith("_log/")}
        missing = needed - on_disk
        assert not missing, f"{self.shape.describe()}: reclamation deleted files still read: {sorted(missing)[:3]}"

    # -- checks ---------------------------------------------------------------------------------------------------
    def check(self, feeds: int = 4) -> None:
        table = Table.open(self.table.uri)
        latest = table.version
        for v in range(self.oldest, latest + 1):
            problem = self.oracle.mismatch(v, table.read(version=v).to_pylist())
            assert problem is None, f"{self.shape.describe()}: {problem}"
        scanned = table.scan(split_bytes=2_000).to_table()  # the streaming reader, buckets cut in key ranges
        problem = self.oracle.mismatch(latest, scanned.to_pylist())
        assert problem is None, f"{self.shape.describe()}: scan: {problem}"
        if self.spark is not None:
            self.check_spark_reads(latest)
        if latest <= self.oldest:
            return
        pairs = {(self.oldest, latest), *pairwise(sorted({self.oldest, *self.rng.integers(self.oldest, latest, 3),
                                                          latest}))}
        for a, b in sorted(pairs)[:feeds + 1]:
            if a < b:
                problem = self.oracle.feed_mismatch(a, b, table.changes(a, b))
                assert problem is None, f"{self.shape.describe()}: {problem}"


    def check_spark_reads(self, latest: int) -> None:
        """The same versions and feed through the ``maintd`` Spark data source (read on the executors)."""
        middle = (self.oldest + latest) // 2
        for v in (middle, latest):
            got = self.spark.read.format("maintd").option("versionAsOf", v).load(self.table.uri).toArrow()
            problem = self.oracle.mismatch(v, got.to_pylist())
            assert problem is None, f"{self.shape.describe()}: Spark read: {problem}"
        if middle < latest:
            feed = (self.spark.read.format("maintd").option("readChangeFeed", "true")
                    .option("startingVersion", middle + 1).option("endingVersion", latest).load(self.table.uri))
            problem = self.oracle.feed_mismatch(middle, latest, feed.toArrow())
            assert problem is None, f"{self.shape.describe()}: Spark change feed: {problem}"


def run_scenario(shape: Shape, root: Path, spark: Any, seed: int) -> dict[str, int]:
    s = Scenario(shape, root, spark, seed)
    counts = {"clustered": 0, "compacted": 0}
    s.write(6)
    s.check()
    counts["clustered"] += s.maintain(CLUSTER, MODES["whole"])
    s.check()
    for mode in MODES.values():
        s.write(3)
        counts["compacted"] += s.maintain(COMPACT, mode)
        s.check()
    s.write(4)
    counts["clustered"] += s.maintain(CLUSTER, MODES["key ranges"])
    s.check()
    s.reclaim()
    s.write(2)
    counts["compacted"] += s.maintain(COMPACT, MODES["key ranges, spilled"])
    s.check()
    assert counts["clustered"] and counts["compacted"], f"{shape.describe()}: maintenance never ran: {counts}"
    return counts


def test_the_matrix_has_at_least_twenty_shapes_covering_every_dimension() -> None:
    assert len(MATRIX) >= 20
    assert len({s.name for s in MATRIX}) == len(MATRIX)
    types = {c.type for s in MATRIX for c in s.columns if c.name in s.primary_key}
    assert types >= {"int8", "int16", "int32", "int64", "string", "binary", "date", "timestamp", "timestamp_tz",
                     "bool"}
    positions = {s.primary_key.index(p) == 0 for s in MATRIX for p in s.partition_by if p in s.primary_key}
    assert positions == {True, False}  # a partition column first in the key and elsewhere
    assert any(len(set(s.primary_key) & set(s.partition_by)) == 2 for s in MATRIX)
    assert {len(s.partition_by) for s in MATRIX} == {0, 1, 2}
    assert {s.prior_rows for s in MATRIX} == {"false", "true", "lookup"}
    assert max(len(s.columns) for s in MATRIX) >= 30 and min(len(s.columns) for s in MATRIX) <= 4
    assert {s.buckets for s in MATRIX} >= {1, 16}


@pytest.mark.slow
@pytest.mark.parametrize("shape", MATRIX, ids=[s.name for s in MATRIX])
def test_a_shape_maintained_in_process_reads_as_the_oracle_says(shape: Shape, tmp_path: Path) -> None:
    run_scenario(shape, tmp_path, None, seed=MATRIX.index(shape))


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.parametrize("shape", MATRIX, ids=[s.name for s in MATRIX])
def test_a_shape_maintained_on_spark_reads_as_the_oracle_says(shape: Shape, tmp_path: Path, spark: Any) -> None:
    run_scenario(shape, tmp_path, spark, seed=1000 + MATRIX.index(shape))
