"""Large buckets: compaction split into key ranges, several BaseFiles per bucket, partial rewrites, reclamation."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from maintd import Table
from maintd.execution import ExecutionOptions, PlanDoc, commit_rewrites, run_plan, task_specs
from maintd.execution.inputs import KEY_INDEX
from maintd.planner import default_policy, plan, with_overrides
from maintd.reclaim import reclaim_table
from maintd.table.files.keys import sort_key

from .helpers import SCHEMA, Model, make_table, plan_all, sorted_read

TARGET = 40_000


def _bases(table: Table) -> list:  # type: ignore[type-arg]
    return sorted((f for f in table.snapshot().files.values() if f.kind == "base"), key=lambda f: f.key_min)


def _with_target(p: PlanDoc, target: int) -> PlanDoc:
    return p.model_copy(update={"tasks": tuple(t.model_copy(update={"target_file_bytes": target}) for t in p.tasks)})


def _clustered(tmp_path: Path, commits: int = 24) -> tuple[Table, Model]:
    """One bucket of level-1 files (their footers carry a key index), written by clustering level-0 files."""
    table, model = make_table(tmp_path, commits=commits, rows=800, keyspace=20_000, buckets=1)
    for chunk in range(0, commits, 6):
        snap = table.snapshot()
        files = sorted((f for f in snap.files.values() if f.level == 0), key=lambda f: f.min_version)[:6]
        p = plan_all(table, "cluster", snap, level=1)
        p = p.model_copy(update={"tasks": (p.tasks[0].model_copy(update={"inputs": tuple(f.path for f in files)}),)})
        small_groups = ExecutionOptions(task_memory_bytes=1 << 20)  # row groups of ~1,000 rows
        assert commit_rewrites(table, p, run_plan(p, table, None, small_groups).results).committed, chunk
    return table, model


def test_a_large_compaction_runs_as_several_key_ranges_and_writes_disjoint_base_files(tmp_path: Path) -> None:
    table, model = _clustered(tmp_path / "a")
    whole, _ = _clustered(tmp_path / "b")
    l1 = [f for f in table.snapshot().files.values() if f.level == 1]
    assert all(KEY_INDEX.encode() in (pq.read_metadata(table.storage.full_path(f.path)).metadata or {}) for f in l1)
    opts = ExecutionOptions(task_input_bytes=sum(f.bytes for f in l1) // 3)
    split = run_plan(_with_target(plan_all(table, "compact"), TARGET), table, None, opts, commit=True)
    assert split.units >= 3 and split.outcome is not None and split.outcome.committed
    single = run_plan(_with_target(plan_all(whole, "compact"), TARGET), whole, None, ExecutionOptions(), commit=True)
    assert single.units == 1
    assert sorted_read(table).equals(model.table()) and sorted_read(whole).equals(model.table())
    bases = _bases(table)
    assert len(bases) > 3
    for a, b in itertools.pairwise(bases):
        assert sort_key(a.key_max) < sort_key(b.key_min), "BaseFiles of a bucket overlap"
    assert max(f.bytes for f in bases) < 3 * TARGET
    rows = pa.concat_tables([pq.read_table(table.storage.full_path(f.path)) for f in bases])
    expected = pa.concat_tables([pq.read_table(whole.storage.full_path(f.path)) for f in _bases(whole)])
    assert rows.equals(expected), "a split compaction writes other rows than a single one"


def test_a_key_range_reads_only_the_row_groups_that_can_hold_its_keys(tmp_path: Path) -> None:
    table, _ = _clustered(tmp_path)
    l1 = [f for f in table.snapshot().files.values() if f.level == 1]
    specs = task_specs(plan_all(table, "compact"), table.snapshot(),
                       ExecutionOptions(task_input_bytes=sum(f.bytes for f in l1) // 4), storage=table.storage)
    assert len(specs) >= 4 and specs[0].key_lo is None and specs[-1].key_hi is None
    for a, b in itertools.pairwise(specs):
        assert a.key_hi == b.key_lo
    from maintd.execution.inputs import open_source

    src = [open_source(table.storage.full_path(f.path), table.storage.filesystem, f, None, ["id"], specs[1].key_range)
           for f in specs[1].inputs]
    assert sum(len(s.row_groups) for s in src) < sum(s.metadata.num_row_groups for s in src)


def _growing(table: Table, model: Model, rng: np.random.Generator, lo: int, hi: int, n: int = 600) -> None:
    k = rng.integers(lo, hi, n)
    b = pa.table({"id": pa.array(k, pa.int64()), "name": [f"n{x}" for x in k], "amount": rng.random(n),
                  "tier": pa.array(np.array(["gold", "silver"])[k % 2]),
                  "op": pa.array((rng.random(n) < 0.1).astype(np.int8))})
    table.write_changes(b, "op")
    model.apply(b)


def test_compaction_rewrites_only_the_key_ranges_new_rows_touch_and_reclamation_keeps_the_rest(
        tmp_path: Path) -> None:
    table = Table.create(str(tmp_path / "t"), SCHEMA, primary_key="id", buckets=1)
    table.set_properties({"acid.data.retain.hours": 0})
    model, rng = Model(), np.random.default_rng(4)
    for _ in range(8):
        _growing(table, model, rng, 0, 40_000, 3000)
    pol = with_overrides(default_policy(), {"compaction": {"target_file_bytes": TARGET, "max_delta_files": 3,
                                                           "min_interval_hours": 0}})
    first = plan(table.snapshot(), pol, datetime.now(UTC), table.uri)
    assert run_plan(first, table, None, commit=True).outcome.committed  # type: ignore[union-attr]
    kept_before = {f.path for f in _bases(table)}
    assert len(kept_before) >= 4
    for _ in range(4):  # keys that grow: new rows land past the last BaseFile and in it
        _growing(table, model, rng, 38_000, 45_000, 200)
    second = plan(table.snapshot(), pol, datetime.now(UTC), table.uri)
    [task] = second.tasks
    rewritten = {p for p in task.inputs if "/base-" in p}
    assert rewritten and rewritten < kept_before and "BaseFiles (keeping" in task.reason
    report = run_plan(second, table, None, commit=True)
    assert report.outcome is not None and report.outcome.committed
    after = _bases(table)
    assert kept_before - rewritten <= {f.path for f in after}, "a BaseFile no DeltaFile touched was rewritten"
    for a, b in itertools.pairwise(after):
        assert sort_key(a.key_max) < sort_key(b.key_min)
    assert sorted_read(table).equals(model.table())
    reclaimed = reclaim_table(table, now=datetime.now(UTC) + timedelta(hours=1), orphan_grace=timedelta(0),
                              force_short_grace=True)
    assert reclaimed.data_files_deleted > 0
    on_disk = {f.path for f in table.storage.walk() if f.path.startswith("bucket-")}
    assert on_disk == set(table.snapshot().files) and sorted_read(table).equals(model.table())
