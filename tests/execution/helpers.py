"""Helpers of the execution tests: tables with a model of their rows, and full-pass plans."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from maintd import Table
from maintd.execution import PlanDoc, PlanTaskDoc
from maintd.table import Snapshot

SCHEMA = "id:int64!,name:string,amount:float64,tier:string"
"""``name`` of many values, ``tier`` of few (and nulls): files store it as a dictionary, merges read it as one."""


class Model:
    """The expected visible rows: key -> row, replaying the writes in order (last occurrence wins)."""

    def __init__(self) -> None:
        self.rows: dict[int, dict[str, Any]] = {}

    def apply(self, batch: pa.Table) -> None:
        for r in batch.to_pylist():
            op = r.pop("op")
            if op == 1:
                self.rows.pop(r["id"], None)
            else:
                self.rows[r["id"]] = r

    def table(self) -> pa.Table:
        rows = [self.rows[k] for k in sorted(self.rows)]
        return pa.Table.from_pylist(rows, schema=pa.schema([pa.field("id", pa.int64(), False), ("name", pa.string()),
                                                           ("amount", pa.float64()), ("tier", pa.string())]))


def batch(rng: np.random.Generator, n: int, keyspace: int, delete_share: float = 0.2) -> pa.Table:
    k = rng.integers(0, keyspace, n)
    tiers = [None, "gold", "silver", "bronze"]
    return pa.table({"id": pa.array(k, pa.int64()), "name": [f"n{x}-{rng.integers(0, 9)}" for x in k],
                     "amount": rng.random(n), "tier": pa.array([tiers[i] for i in rng.integers(0, 4, n)], pa.string()),
                     "op": pa.array((rng.random(n) < delete_share).astype(np.int8))})


def make_table(root: Path, commits: int = 20, rows: int = 200, keyspace: int = 600, buckets: int = 4,
               seed: int = 1) -> tuple[Table, Model]:
    table = Table.create(str(root / "t"), SCHEMA, primary_key="id", buckets=buckets)
    model = Model()
    rng = np.random.default_rng(seed)
    for _ in range(commits):
        b = batch(rng, rows, keyspace)
        table.write_changes(b, "op")
        model.apply(b)
    return table, model


def plan_all(table: Table, kind: str, snap: Snapshot | None = None, level: int | None = 1,
             only_level0: bool = False) -> PlanDoc:
    """A plan rewriting every (level-0) file of every bucket, as the planner would for a full pass."""
    snap = snap or table.snapshot()
    tasks = []
    for (part, bucket), files in sorted(snap.by_bucket().items(), key=lambda kv: kv[0][1]):
        inputs = [f.path for f in files if not only_level0 or (f.kind == "delta" and f.level == 0)]
        if inputs:
            where = "".join(f"{c}={v}/" for c, v in part)
            tasks.append(PlanTaskDoc(task_id=f"{kind}-{where}{bucket}", kind=kind, partition=dict(part),  # type: ignore[arg-type]
                                     bucket=bucket, target_level=level if kind == "cluster" else None,
                                     inputs=tuple(inputs)))
    return PlanDoc(table_uri=table.uri, read_version=snap.version, tasks=tuple(tasks))


def sorted_read(table: Table, version: int | None = None) -> pa.Table:
    return table.read(version=version).sort_by("id")
