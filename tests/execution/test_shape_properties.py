"""Property tests over table shapes: the merge, planning and key-range invariants hold for any shape, not one schema.

Hypothesis draws the shape (:func:`shapes.shapes`: keys of 1 to 3 columns of every key type, with partition
columns or not and in any order, 0 to 2 partition columns, nullable and text columns, 1 to 16 buckets, every
``changes.prior.rows`` mode) and the data; the table is written, then maintained by maintd's own planner,
execution and commit, and checked against the shape's oracle:

* a plan never names a file twice, nor a file outside its task's (partition, bucket), nor one of another
  kind than its task rewrites;
* every way a unit merges (whole, in key ranges, spilled) writes the same rows, and the table then reads as
  the oracle says at every version, with the change feed between them;
* a scan cut into key ranges reads every row once, as a whole read does.

``MAINTD_SHAPE_EXAMPLES`` changes the number of examples (docs/testing.md).
"""

from __future__ import annotations

import os
import tempfile
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from shapes import Oracle, Shape, shapes

from maintd import Table
from maintd.execution import ExecutionOptions, run_plan
from maintd.planner import default_policy, plan, with_overrides
from maintd.table.log.snapshot import partition_key

SETTINGS = settings(max_examples=int(os.environ.get("MAINTD_SHAPE_EXAMPLES", "8")), deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])
CLUSTER = with_overrides(default_policy(), {"clustering": {"level1": {"min_files": 2}},
                                            "compaction": {"enabled": False}})


def compact(target: int) -> Any:
    return with_overrides(default_policy(), {"clustering": {"enabled": False},
                                             "compaction": {"max_delta_files": 1, "min_interval_hours": 0,
                                                            "target_file_bytes": target}})


KEYS = 30
THREADS = ExecutionOptions(in_process_workers="threads", in_process_threads=2)


def write(table: Table, shape: Shape, oracle: Oracle, rng: np.random.Generator, commits: int) -> None:
    """Upserts, deletes and mixed changes of keys that collide, each one committed version."""
    for i in range(commits):
        keys = rng.integers(0, KEYS, int(rng.integers(1, 12)))
        rows = shape.rows(rng, keys, f"c{table.version + 1}-{i}")
        roll = rng.random()
        if roll < 0.5:
            oracle.upsert(table.upsert(shape.batch(rows)), rows)
        elif roll < 0.7:
            gone = shape.keys_only(rows)
            oracle.delete(table.delete(shape.batch(gone, shape.identity_columns)), gone)
        else:
            ops = [int(o) for o in rng.integers(0, 2, len(rows))]
            batch = shape.batch(rows).append_column("op", pa.array(ops, pa.int8()))
            oracle.changes(table.write_changes(batch, "op"), rows, ops)


def check_plan(table: Table, made: Any) -> None:
    """The planning invariants: each input once, in its task's group, of the kind the task rewrites."""
    snap = table.snapshot(made.read_version)
    groups = snap.by_bucket()
    seen: set[str] = set()
    for t in made.tasks:
        group = {f.path: f for f in groups.get((partition_key(t.partition, snap.metadata.partition_by), t.bucket), [])}
        assert set(t.inputs) <= set(group), f"task {t.task_id} names files outside its bucket"
        assert not seen & set(t.inputs), f"task {t.task_id} names a file another task names"
        seen |= set(t.inputs)
        if t.kind == "cluster":
            assert all(group[p].kind == "delta" and group[p].level == 0 for p in t.inputs), t
        else:
            assert len(t.inputs) == len(group), f"compaction {t.task_id} leaves files of its bucket out"


def outputs(table: Table, report: Any) -> dict[str, pa.Table]:
    """The rows each task wrote, in key order (its output files by their first key)."""
    out = {}
    for r in report.results:
        assert r.ok, r.error
        files = [pq.read_table(table.storage.full_path(a.path)) for a in sorted(r.adds, key=lambda a: a.key_min)]
        out[r.task_id] = pa.concat_tables(files) if files else None
    return out


def check(table: Table, oracle: Oracle, shape: Shape) -> None:
    reopened = Table.open(table.uri)
    versions = range(reopened.version + 1)
    for v in versions:
        problem = oracle.mismatch(v, reopened.read(version=v).to_pylist())
        assert problem is None, f"{shape.describe()}: {problem}"
    for a, b in ((0, reopened.version), (reopened.version // 2, reopened.version)):
        if a < b:
            problem = oracle.feed_mismatch(a, b, reopened.changes(a, b))
            assert problem is None, f"{shape.describe()}: {problem}"


@pytest.mark.slow
@SETTINGS
@given(shapes(narrow=True), st.integers(0, 2**31), st.sampled_from(["cluster", "compact"]),
       st.sampled_from([3_000, 40_000]), st.integers(1, 4))
def test_any_shape_merges_alike_in_every_mode_and_reads_as_the_oracle_says(shape: Shape, seed: int, kind: str,
                                                                           budget: int, splits: int) -> None:
    event(f"{len(shape.partition_by)} partition column(s), {'with' if shape.key_includes_partition else 'none'} "
          f"in the key")
    rng = np.random.default_rng(seed)
    with tempfile.TemporaryDirectory() as tmp:
        table = shape.create(f"{tmp}/t")
        oracle = Oracle(shape)
        write(table, shape, oracle, rng, 6)
        first = plan(table.snapshot(), compact(2_500), datetime.now(UTC), table.uri)  # small BaseFiles: key ranges
        check_plan(table, first)
        if first.tasks:
            report = run_plan(first, table, None, THREADS, commit=True)
            assert report.outcome is not None and report.outcome.version is not None, report.outcome
            oracle.unchanged(report.outcome.version)
        write(table, shape, oracle, rng, 4)
        made = plan(table.snapshot(), CLUSTER if kind == "cluster" else compact(64 << 20), datetime.now(UTC),
                    table.uri)
        check_plan(table, made)
        if made.tasks:
            whole = outputs(table, run_plan(made, table, None, THREADS))
            total = max(t.input_bytes for t in made.tasks)
            opts = THREADS.model_copy(update={"task_memory_bytes": budget,
                                              "task_input_bytes": total // splits + 1 if kind == "compact"
                                              else 1 << 30})
            report = run_plan(made, table, None, opts, commit=True)
            small = outputs(table, report)
            event(f"{kind}, {'several key ranges' if any(r.units > 1 for r in report.results) else 'whole units'}, "
                  f"{'spilled' if any(r.mode != 'memory' for r in report.results) else 'in memory'}")
            for task, rows in whole.items():
                assert small[task] == rows or small[task].equals(rows), f"{shape.describe()}: task {task} differs"
            assert report.outcome is not None and report.outcome.version is not None, report.outcome
            oracle.unchanged(report.outcome.version)
        check(table, oracle, shape)


@SETTINGS
@given(shapes(narrow=True), st.integers(0, 2**31), st.sampled_from([500, 2_000, 20_000]))
def test_a_scan_in_key_ranges_reads_every_row_of_any_shape_once(shape: Shape, seed: int, split: int) -> None:
    rng = np.random.default_rng(seed)
    with tempfile.TemporaryDirectory() as tmp:
        table = shape.create(f"{tmp}/t")
        oracle = Oracle(shape)
        write(table, shape, oracle, rng, 5)
        made = plan(table.snapshot(), compact(1_500), datetime.now(UTC), table.uri)
        if made.tasks:
            report = run_plan(made, table, None, THREADS, commit=True)
            assert report.outcome is not None and report.outcome.version is not None, report.outcome
            oracle.unchanged(report.outcome.version)
        write(table, shape, oracle, rng, 3)
        scanned = table.scan(split_bytes=split).to_table()
        problem = oracle.mismatch(table.version, scanned.to_pylist())
        assert problem is None, f"{shape.describe()}: scan in key ranges of {split} bytes: {problem}"
