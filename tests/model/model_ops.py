"""The data operations of the model check, for a table of any shape, and how a scenario's shape is drawn.

A writer journals an operation as the key numbers it drew, the seed of the rows' values and a tag (``record``);
the checker rebuilds the very rows from that (:func:`op_rows`), so the journal stays small and JSON, whatever the
column types (dates, binary, time zones), and both sides build rows with one function of :mod:`shapes`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
from shapes import Oracle, Row, Shape, random_shape

KEYS = 40
"""Key numbers a scenario's writers draw from: few enough that their operations collide."""
ENGINES = ("in-process", "spark")
PROCESS_MODELS = ("spawn", "thread", "fork")
"""How a scenario's writers and reclaimer run: plain processes of their own (started with spawn semantics:
a fresh interpreter), threads of one process, or children forked (multiprocessing's fork context) from a
process that has itself written to a table and used the table's storage before forking."""


@dataclass(frozen=True)
class Draw:
    """What a scenario drew besides its data: the table's shape, the maintenance engine, the process model."""

    shape_seed: int
    engine: str
    process_model: str

    @property
    def shape(self) -> Shape:
        return shape_of(self.shape_seed)


def shape_of(seed: int) -> Shape:
    return random_shape(np.random.default_rng(seed), name=f"shape-{seed}")


def draw(rng: np.random.Generator, spark_share: float) -> Draw:
    return Draw(int(rng.integers(2**31)), "spark" if rng.random() < spark_share else "in-process",
                str(rng.choice(PROCESS_MODELS)))


def shape_stats(d: Draw) -> dict[str, int]:
    """One scenario's shape as counters (summed over a run, they say how many scenarios had each trait)."""
    s = d.shape
    types = {c.name: c.type for c in s.columns}
    out = {f"engine {d.engine}": 1, f"process model {d.process_model}": 1,
           f"partition columns {len(s.partition_by)}": 1, f"key columns {len(s.primary_key)}": 1,
           f"changes.prior.rows {s.prior_rows}": 1, f"buckets {s.buckets}": 1,
           "partition columns in the key": int(s.key_includes_partition),
           "a partition column first in the key": int(bool(s.partition_by) and s.primary_key[0] in s.partition_by),
           "wide (30+ columns)": int(len(s.columns) >= 30),
           "nullable value columns": int(any(c.nullable for c in s.columns)),
           "text columns": int(any(c.role == "text" for c in s.columns))}
    for t in sorted({types[k] for k in s.primary_key if k not in s.partition_by}):
        out[f"key type {t}"] = 1
    for t in sorted({types[p] for p in s.partition_by}):
        out[f"partition type {t}"] = 1
    return out


def record(kind: str, rng: np.random.Generator, offset: int) -> dict[str, Any]:
    """The journaled form of one writer operation: key numbers, the seed of its values, a tag, and for mixed
    changes which rows are deletes."""
    n = int(rng.integers(1, 8))
    rec: dict[str, Any] = {"kind": kind, "keys": [int(k) for k in rng.integers(0, KEYS, n)],
                           "rowseed": int(rng.integers(2**31)), "tag": f"w{offset}-{int(rng.integers(10**6))}"}
    if kind == "changes":
        rec["ops"] = [int(o) for o in rng.integers(0, 2, n)]
    if kind == "overwrite":
        rec["whole"] = bool(rng.random() < 0.3)
    return rec


def op_rows(shape: Shape, rec: Mapping[str, Any]) -> tuple[list[Row], dict[str, Any] | None]:
    """The rows of a journaled operation and, for an overwrite, the partition it replaces (None: the table).

    An overwrite of one partition keeps the rows of the first row's partition (a writer overwrites a partition
    with rows of that partition)."""
    rows = shape.rows(np.random.default_rng(rec["rowseed"]), rec["keys"], rec["tag"])
    if rec["kind"] == "delete":
        return shape.keys_only(rows), None
    if rec["kind"] != "overwrite" or rec.get("whole") or not shape.partition_by:
        return rows, None
    spec = {c: rows[0][c] for c in shape.partition_by}
    return [r for r in rows if all(r[c] == v for c, v in spec.items())], spec


def batch(shape: Shape, rec: Mapping[str, Any]) -> tuple[pa.Table, dict[str, Any] | None]:
    """The Arrow batch a writer sends for ``rec`` (mixed changes with their ``op`` column)."""
    rows, spec = op_rows(shape, rec)
    if rec["kind"] == "delete":
        return shape.batch(rows, shape.identity_columns), None
    out = shape.batch(rows)
    if rec["kind"] == "changes":
        out = out.append_column("op", pa.array(rec["ops"], pa.int8()))
    return out, spec


def apply(shape: Shape, oracle: Oracle, version: int, rec: Mapping[str, Any] | None) -> None:
    """Apply a journaled operation (None, maintenance or PURGE: no row changes) at ``version`` of the oracle."""
    kind = rec["kind"] if rec is not None else None
    if rec is None or kind not in ("upsert", "delete", "changes", "overwrite"):
        oracle.unchanged(version)
        return
    rows, spec = op_rows(shape, rec)
    if kind == "upsert":
        oracle.upsert(version, rows)
    elif kind == "delete":
        oracle.delete(version, rows)
    elif kind == "changes":
        oracle.changes(version, rows, rec["ops"])
    else:
        oracle.overwrite(version, rows, spec)
