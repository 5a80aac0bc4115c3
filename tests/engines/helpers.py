"""Helpers of the engine tests: a table with a BaseFile and level-0/1/2 DeltaFiles in every bucket, and a
plain model of its rows."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from maintd import Table
from maintd.execution import PlanDoc, PlanTaskDoc, commit_rewrites, execute
from maintd.table import AddFile

SCHEMA = "id:int64!,region:string!,name:string,amount:float64,day:date"
REGIONS = ("ap", "eu", "us")
ARROW = pa.schema([pa.field("id", pa.int64(), False), pa.field("region", pa.string(), False),
                   ("name", pa.string()), ("amount", pa.float64()), ("day", pa.date32())])


def changes(rng: np.random.Generator, n: int, keyspace: int, delete_share: float = 0.2) -> pa.Table:
    """A batch of upserts and deletes (``op`` 0/1); a key's region is fixed by the key."""
    ids = rng.integers(0, keyspace, n)
    return pa.table({
        "id": pa.array(ids, pa.int64()),
        "region": [REGIONS[int(i) % 3] for i in ids],
        "name": [f"n{i}-{rng.integers(0, 99)}" for i in ids],
        "amount": rng.random(n),
        "day": pa.array([dt.date(2024, 1, 1) + dt.timedelta(days=int(i) % 30) for i in ids], pa.date32()),
        "op": pa.array((rng.random(n) < delete_share).astype(np.int8)),
    })


class Model:
    """The expected visible rows: key -> row, replaying writes in order (the last occurrence wins)."""

    def __init__(self) -> None:
        self.rows: dict[int, dict[str, Any]] = {}

    def apply(self, batch: pa.Table) -> None:
        for r in batch.to_pylist():
            if r.pop("op") == 1:
                self.rows.pop(r["id"], None)
            else:
                self.rows[r["id"]] = r

    def table(self) -> pa.Table:
        return pa.Table.from_pylist([self.rows[k] for k in sorted(self.rows)], schema=ARROW)


def rewrite(table: Table, kind: str, pick: Callable[[AddFile], bool], level: int | None = None) -> int:
    """Run one maintenance rewrite of the picked files of every bucket (locally); returns its version."""
    snap = table.snapshot()
    tasks = []
    for (part, bucket), files in sorted(snap.by_bucket().items(), key=lambda kv: (str(kv[0][0]), kv[0][1])):
        inputs = tuple(f.path for f in files if pick(f))
        if inputs and (kind == "compact" or len(inputs) > 1):
            tasks.append(PlanTaskDoc(task_id=f"{kind}-{part}-{bucket}", kind=kind,  # type: ignore[arg-type]
                                     partition=dict(part), bucket=bucket, target_level=level, inputs=inputs))
    plan = PlanDoc(table_uri=table.uri, read_version=snap.version, tasks=tuple(tasks))
    outcome = commit_rewrites(table, plan, execute(plan, table, None))
    assert outcome.version is not None and not outcome.failed, outcome
    return outcome.version


def level(n: int) -> Callable[[AddFile], bool]:
    return lambda f: f.kind == "delta" and f.level == n


def layered_table(root: Path, *, buckets: int = 2, keyspace: int = 900, rows: int = 150, seed: int = 7
                  ) -> tuple[Table, Model, dict[str, int]]:
    """A partitioned table whose buckets hold a BaseFile, a level-2, a level-1 and level-0 DeltaFiles.

    Returns the table, the model of its latest rows, and named versions along the way.
    """
    table = Table.create(str(root / "layered"), SCHEMA, primary_key="id", partition_by="region", buckets=buckets)
    model, rng, marks = Model(), np.random.default_rng(seed), {}

    def write(k: int) -> None:
        for _ in range(k):
            b = changes(rng, rows, keyspace)
            table.write_changes(b, "op")
            model.apply(b)

    write(8)
    marks["before_base"] = table.version
    rewrite(table, "compact", lambda f: True)
    write(4)
    rewrite(table, "cluster", level(0), level=1)
    write(4)
    marks["two_l1"] = rewrite(table, "cluster", level(0), level=1)
    rewrite(table, "cluster", level(1), level=2)
    write(4)
    rewrite(table, "cluster", level(0), level=1)
    marks["before_l0"] = table.version
    write(3)
    marks["latest"] = table.version
    return table, model, marks


def kinds(table: Table) -> set[str]:
    """The file kinds present: ``base``, ``L0``, ``L1``, ``L2``."""
    return {"base" if f.kind == "base" else f"L{f.level}" for f in table.snapshot().files.values()}


def by_key(t: pa.Table) -> pa.Table:
    return t.sort_by([("id", "ascending")])
