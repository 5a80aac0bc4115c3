"""Randomized: every way a unit merges (whole, streamed, spilled in passes; in key ranges) writes the same rows.

The tables carry a text column of few values (dictionary-encoded from the writer on, merged as dictionaries), or of
many values per table in few per file (dictionary-encoded files whose merged dictionary no longer fits a page).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from maintd import Table
from maintd.execution import ExecutionOptions, PlanDoc, PlanTaskDoc, commit_rewrites, run_plan
from maintd.table.files.dictionaries import dictionary_columns

SETTINGS = settings(max_examples=int(os.environ.get("MAINTD_MODES_EXAMPLES", "20")), deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])
"""20 examples in CI; ``MAINTD_MODES_EXAMPLES=300`` for a deeper run (docs/testing.md)."""


def _table(root: Path, seed: int, composite: bool, commits: int, rows: int, text: str = "few"
           ) -> tuple[Table, dict]:  # type: ignore[type-arg]
    """A one-bucket table: ``commits`` batches, compacted into small BaseFiles (several key ranges), then
    half as many batches more; returns it and the expected visible rows."""
    schema = "a:int64!,b:string!,v:float64,c:string" if composite else "id:int64!,v:float64,c:string"
    table = Table.create(str(root / "t"), schema, primary_key=("a", "b") if composite else "id", buckets=1)
    rng = np.random.default_rng(seed)
    state: dict = {}  # type: ignore[type-arg]
    _write(table, rng, state, composite, commits, rows, text)
    first = _plan(table, "compact")
    first = first.model_copy(update={"tasks": (first.tasks[0].model_copy(update={"target_file_bytes": 3000}),)})
    assert commit_rewrites(table, first, run_plan(first, table).results).committed
    _write(table, rng, state, composite, commits // 2 + 1, rows, text)
    return table, state


def _text(rng: np.random.Generator, n: int, text: str) -> list[str | None]:
    """Few values (and nulls) in every file, or a few of many: 40-byte strings, up to 60 per file, that together
    outgrow a dictionary page."""
    if text == "few":
        return [None if x == 3 else ("red", "green", "blue")[x] for x in rng.integers(0, 4, n).tolist()]
    pool = rng.integers(0, 10**9, max(1, min(60, n // 4)))
    return [f"{x:040d}" for x in rng.choice(pool, n).tolist()]


def _write(table: Table, rng: np.random.Generator, state: dict, composite: bool, commits: int,  # type: ignore[type-arg]
           rows: int, text: str = "few") -> None:
    for _ in range(commits):
        n = int(rng.integers(1, rows))
        ks = rng.integers(0, rows * 3, n)
        ops = (rng.random(n) < 0.2).astype(np.int8)
        vals = rng.random(n)
        cs = _text(rng, n, text)
        if composite:  # a first key column with two values: the cut must use the whole key
            cols = {"a": pa.array(ks % 2, pa.int64()), "b": [f"k{x:06d}" for x in ks]}
            keys = list(zip((ks % 2).tolist(), [f"k{x:06d}" for x in ks], strict=True))
        else:
            cols = {"id": pa.array(ks, pa.int64())}
            keys = [(int(x),) for x in ks]
        table.write_changes(pa.table({**cols, "v": vals, "c": pa.array(cs, pa.string()), "op": pa.array(ops)}),
                            "op")
        for k, op, v, c in zip(keys, ops.tolist(), vals.tolist(), cs, strict=True):  # the last occurrence wins
            if op:
                state.pop(k, None)
            else:
                state[k] = (v, c)
    return table, state


def _plan(table: Table, kind: str, level: int = 1) -> PlanDoc:
    """Compaction of the whole bucket, or clustering of its level-0 files."""
    snap = table.snapshot()
    inputs = sorted(p for p, f in snap.files.items() if kind == "compact" or f.level == 0)
    task = PlanTaskDoc(task_id=f"{kind}-0", kind=kind, bucket=0,  # type: ignore[arg-type]
                       target_level=level if kind == "cluster" else None, inputs=tuple(inputs))
    return PlanDoc(table_uri=table.uri, read_version=snap.version, tasks=(task,))


def _written(table: Table, adds: tuple) -> pa.Table:  # type: ignore[type-arg]
    return pa.concat_tables([pq.read_table(table.storage.full_path(a.path))
                             for a in sorted(adds, key=lambda a: a.key_min)])


@pytest.mark.slow
@SETTINGS
@given(st.integers(0, 10_000), st.booleans(), st.integers(2, 30), st.sampled_from(["cluster", "compact"]),
       st.sampled_from([4_000, 30_000, 200_000]), st.integers(1, 4), st.sampled_from(["few", "many"]))
def test_every_merge_mode_writes_what_the_whole_merge_writes(seed: int, composite: bool, commits: int, kind: str,
                                                             budget: int, splits: int, text: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        table, state = _table(Path(tmp), seed, composite, commits, 300, text)
        plan = _plan(table, kind)
        whole = run_plan(plan, table, None, ExecutionOptions()).results[0]
        assert whole.ok and whole.mode == "memory"
        total = sum(f.bytes for f in table.snapshot().files.values())
        opts = ExecutionOptions(task_memory_bytes=budget,
                                task_input_bytes=total // splits + 1 if kind == "compact" else 1 << 30)
        small = run_plan(plan, table, None, opts).results[0]
        assert small.ok, small.error
        event(f"mode {small.mode}, {'several key ranges' if small.units > 1 else 'one unit'}")
        listed = {bool(dictionary_columns(pq.read_metadata(table.storage.full_path(a.path)))) for a in small.adds}
        event(f"text of {text} values, outputs {'listing' if listed == {True} else 'not listing'} it as a dictionary")
        assert _written(table, small.adds).equals(_written(table, whole.adds)), (small.mode, small.units)
        commit_rewrites(table, plan, [small])
        got = table.read().to_pylist()
        keys = ("a", "b") if composite else ("id",)
        assert {tuple(r[k] for k in keys): (r["v"], r["c"]) for r in got} == state
