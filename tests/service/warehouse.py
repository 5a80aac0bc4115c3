"""Tables for the daemon tests, a model of their rows, and a writer that runs in its own process.

As a script: ``python warehouse.py URI COMMITS SEED PAUSE_SECONDS OUT.parquet`` commits ``COMMITS``
batches of upserts and deletes to ``URI``, sleeping ``PAUSE_SECONDS`` between commits, then writes every
batch it committed, in order, to ``OUT.parquet`` so that the test can replay them into a :class:`Model`.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from maintd import Table

SCHEMA = "id:int64!,name:string,amount:float64"
COLUMNS = pa.schema([pa.field("id", pa.int64(), False), ("name", pa.string()), ("amount", pa.float64())])


class Model:
    """The rows a reader must see: key -> row, replaying the batches in commit order."""

    def __init__(self) -> None:
        self.rows: dict[int, dict[str, Any]] = {}

    def apply(self, batch: pa.Table) -> None:
        for row in batch.to_pylist():
            if row.pop("op") == 1:
                self.rows.pop(row["id"], None)
            else:
                self.rows[row["id"]] = row

    def table(self) -> pa.Table:
        return pa.Table.from_pylist([self.rows[k] for k in sorted(self.rows)], schema=COLUMNS)


def batch(rng: np.random.Generator, rows: int = 50, keyspace: int = 400) -> pa.Table:
    keys = rng.integers(0, keyspace, rows)
    return pa.table({"id": pa.array(keys, pa.int64()), "name": [f"n{k}-{rng.integers(0, 9)}" for k in keys],
                     "amount": rng.random(rows), "op": pa.array((rng.random(rows) < 0.2).astype(np.int8))})


def create(uri: Path, *, buckets: int = 2, properties: dict[str, str] | None = None) -> Table:
    return Table.create(str(uri), SCHEMA, primary_key="id", buckets=buckets, name=uri.name,
                        properties=properties or {})


def write(table: Table, model: Model, commits: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    for _ in range(commits):
        b = batch(rng)
        table.write_changes(b, "op")
        model.apply(b)


def read_sorted(uri: str | Path) -> pa.Table:
    return Table.open(str(uri)).read().select(COLUMNS.names).sort_by("id")


def main(uri: str, commits: int, seed: int, pause: float, out: str) -> None:
    table = Table.open(uri)
    rng = np.random.default_rng(seed)
    written = []
    for _ in range(commits):
        b = batch(rng)
        table.write_changes(b, "op")
        written.append(b)
        time.sleep(pause)
    pq.write_table(pa.concat_tables(written), Path(out))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), sys.argv[5])
