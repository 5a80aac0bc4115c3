"""The data operations of the model check, for a table of any shape, and how a scenario's shape is drawn.

A writer journals an operation as the key numbers it drew, the seed of the rows' values and a tag (``record``);
the checker rebuilds the very rows from that (:func:`op_rows`), so the journal stays small and JSON, whatever the
column types (dates, binary, time zones), and both sides build rows with one function of :mod:`shapes`.

In a share of scenarios (:data:`EVOLUTION_SHARE`, :func:`draw_evolution`) one writer changes the schema midway:
an ``add_columns`` operation adds 1 or 2 nullable value columns, or its write brings them with ``merge_schema``;
from then on its records name the columns (``cols``) whose values it writes, and the other writers keep writing
rows of the shape as created (nulls in the new columns). In another share (:data:`FEATURES_SHARE`,
:func:`draw_features`) the table is on named table features: created on them, or moved there by one writer's
``upgrade_protocol`` operation midway, with some features asked for.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
from shapes import Oracle, Row, Shape, random_shape

from maintd.table.log.features import REGISTRY

KEYS = 40
"""Key numbers a scenario's writers draw from: few enough that their operations collide."""
ENGINES = ("in-process", "spark")
PROCESS_MODELS = ("spawn", "thread", "fork")
"""How a scenario's writers and reclaimer run: plain processes of their own (started with spawn semantics:
a fresh interpreter), threads of one process, or children forked (multiprocessing's fork context) from a
process that has itself written to a table and used the table's storage before forking."""


FEATURE_NAMES = tuple(REGISTRY)
"""The named features a scenario may ask for."""
EVOLUTION_SHARE = 0.3
"""The share of scenarios in which a writer adds columns to the schema midway."""
EVOLUTION_TYPES = ("int64", "string", "float64", "float32", "date", "bool", "timestamp", "binary", "int32")
EVOLUTION_MODES = ("add_columns", "merge_schema")
"""How the evolving writer adds the columns: ``Table.add_columns`` (then writes values into them; with
``merge_schema`` if the outcome of the addition was not acknowledged), or its next write with
``merge_schema=True``."""


@dataclass(frozen=True)
class Evolution:
    """A scenario's schema change: which writer makes it, before which of its operations, how, which columns."""

    writer: int
    at: int
    mode: str
    columns: tuple[tuple[str, str], ...]

    def command(self) -> dict[str, Any]:
        return {"at": self.at, "mode": self.mode, "cols": [list(c) for c in self.columns]}


def draw_evolution(seed: int, writers: int, share: float = EVOLUTION_SHARE) -> Evolution | None:
    """The schema change of the scenario of ``seed`` (None in most: no change), from a generator of its own so
    that the rest of the scenario draws what it drew before."""
    rng = np.random.default_rng([seed, 0x5C4E])
    if rng.random() >= share:
        return None
    columns = tuple((f"added{i}", str(rng.choice(EVOLUTION_TYPES))) for i in range(int(rng.integers(1, 3))))
    return Evolution(int(rng.integers(writers)), int(rng.integers(0, 2)), str(rng.choice(EVOLUTION_MODES)), columns)


FEATURES_SHARE = 0.3
"""The share of scenarios whose table is on named table features: created so, or moved there midway by a writer's
``upgrade_protocol`` while the others write."""
FEATURES_MODES = ("create", "upgrade")


@dataclass(frozen=True)
class Features:
    """A scenario's table features: how the table gets onto named features (``create``: at create; ``upgrade``: by
    writer ``writer`` before its operation ``at``), and the features asked for (their dependencies come along)."""

    mode: str
    asked: tuple[str, ...]
    writer: int = 0
    at: int = 0

    def command(self) -> dict[str, Any]:
        return {"at": self.at, "features": list(self.asked)}


def draw_features(seed: int, writers: int, share: float = FEATURES_SHARE) -> Features | None:
    """The table features of the scenario of ``seed`` (None in most: a legacy table), from a generator of its own so
    that the rest of the scenario draws what it drew before."""
    rng = np.random.default_rng([seed, 0xFEA7])
    if rng.random() >= share:
        return None
    mode = str(rng.choice(FEATURES_MODES))
    asked = tuple(n for n in FEATURE_NAMES if rng.random() < 0.3)
    return Features(mode, asked, int(rng.integers(writers)), int(rng.integers(0, 3)))


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


def shape_for(shape: Shape, rec: Mapping[str, Any]) -> Shape:
    """The shape a writer wrote ``rec``'s rows in: the table's as created, with the columns it added (``cols``)."""
    return shape.with_added([(n, t) for n, t in rec["cols"]]) if rec.get("cols") else shape


def op_rows(shape: Shape, rec: Mapping[str, Any]) -> tuple[list[Row], dict[str, Any] | None]:
    """The rows of a journaled operation and, for an overwrite, the partition it replaces (None: the table).

    An overwrite of one partition keeps the rows of the first row's partition (a writer overwrites a partition
    with rows of that partition)."""
    shape = shape_for(shape, rec)
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
    out = shape_for(shape, rec).batch(rows)
    if rec["kind"] == "changes":
        out = out.append_column("op", pa.array(rec["ops"], pa.int8()))
    return out, spec


def added_by(oracle: Oracle, rec: Mapping[str, Any] | None) -> list[str]:
    """The columns the commit of ``rec`` adds to the schema the oracle has: an ``add_columns``'s, or those a
    ``merge_schema`` write brings that the schema lacks (a write that merges none adds nothing)."""
    if rec is None or not (rec["kind"] == "add_columns" or rec.get("merge")):
        return []
    return [n for n, _ in rec["cols"] if n not in oracle.names]


def apply(shape: Shape, oracle: Oracle, version: int, rec: Mapping[str, Any] | None) -> None:
    """Apply a journaled operation (None, maintenance or PURGE: no row changes) at ``version`` of the oracle;
    the columns it adds first (:func:`added_by`)."""
    oracle.add_columns(added_by(oracle, rec))
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
