"""Table shapes drawn at random, with rows for them and an oracle of what a table of that shape must read.

A *shape* is everything about a table that is not its rows: the primary key (1 to 3 columns, of any key type,
including partition columns or not, in any order), the partition columns (0 to 2, of string, integer and date
type), the value columns (narrow, or wide: 30 and more; nullable ones holding nulls; text columns of few
distinct values), the buckets (1 to 16) and the properties (``changes.prior.rows`` false, true or lookup). The
checks that prove maintd correct draw the shape as well as the data: a test that only ever builds one shape
proves that shape.

* :func:`random_shape` draws one from a seeded generator (:func:`shapes`: as a hypothesis strategy);
  :data:`MATRIX` is a fixed list of named shapes that covers every dimension (each key type, a partition
  column first, last and in the middle of the key, two partition columns both in the key, ...).
* :meth:`Shape.rows` draws rows for a pool of keys: a key's partition values are a function of the key (as a
  writer's would be), so keys collide across operations.
* :class:`Oracle` is the specification in executable form: the rows of every version, from the operations
  applied in version order, and the net change between two versions as the change feed reports it.

A row's identity is its partition values and its primary key (docs/format.md); both are compared as the
values read back, so a shape whose key includes a partition column names that column once.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
from hypothesis import strategies as st

from maintd import Table
from maintd.table.files.schema import TYPES

KEY_TYPES = ("int8", "int16", "int32", "int64", "string", "binary", "date", "timestamp", "timestamp_tz", "bool")
PARTITION_TYPES = ("string", "int32", "int64", "date")
VALUE_TYPES = ("int32", "int64", "float32", "float64", "string", "bool", "date", "timestamp", "binary")
PRIOR_ROWS = ("false", "true", "lookup")
TEXT_VALUES = ("red", "green", "blue", "amber")

Row = dict[str, Any]
Identity = tuple[Any, ...]


@dataclass(frozen=True)
class Column:
    name: str
    type: str
    nullable: bool
    role: str
    """``key``, ``partition`` (a partition column outside the key), ``value`` or ``text`` (few distinct values)."""


@dataclass(frozen=True)
class Shape:
    """A table's shape: columns, primary key, partition columns, buckets, properties."""

    name: str
    columns: tuple[Column, ...]
    primary_key: tuple[str, ...]
    partition_by: tuple[str, ...]
    buckets: int
    prior_rows: str = "false"
    properties: Mapping[str, str] = field(default_factory=dict)

    # -- the table ------------------------------------------------------------------------------------------------
    @property
    def spec(self) -> str:
        """The schema in maintd's spec language (``name:type``, ``!`` for NOT NULL)."""
        return ",".join(f"{c.name}:{c.type}{'' if c.nullable else '!'}" for c in self.columns)

    @property
    def schema(self) -> pa.Schema:
        return pa.schema([pa.field(c.name, TYPES[c.type], nullable=c.nullable) for c in self.columns])

    @property
    def identity_columns(self) -> tuple[str, ...]:
        """The columns that identify a row: its partition values and its primary key (each named once)."""
        return tuple(dict.fromkeys([*self.partition_by, *self.primary_key]))

    @property
    def key_includes_partition(self) -> bool:
        return bool(set(self.primary_key) & set(self.partition_by))

    def table_properties(self) -> dict[str, str]:
        return {"changes.prior.rows": self.prior_rows, **self.properties}

    def create(self, uri: str, *, features: Sequence[str] | None = None, **properties: Any) -> Table:
        """Create the table of this shape (``features``: on named table features, as ``Table.create`` takes them)."""
        return Table.create(uri, self.spec, primary_key=list(self.primary_key), partition_by=list(self.partition_by),
                            buckets=self.buckets, properties={**self.table_properties(), **properties},
                            features=features)

    def with_added(self, columns: Sequence[tuple[str, str]]) -> Shape:
        """This shape with nullable value columns ``(name, type)`` appended, as ``Table.add_columns`` appends
        them (the rows a writer that knows them writes)."""
        added = tuple(Column(n, t, True, "value") for n, t in columns)
        return Shape(self.name, (*self.columns, *added), self.primary_key, self.partition_by, self.buckets,
                     self.prior_rows, self.properties)

    def describe(self) -> str:
        types = {c.name: c.type for c in self.columns}
        key = ", ".join(f"{k}:{types[k]}" for k in self.primary_key)
        parts = ", ".join(f"{p}:{types[p]}" for p in self.partition_by) or "none"
        return (f"{self.name}: key ({key}), partitions ({parts}), {len(self.columns)} columns, "
                f"{self.buckets} bucket(s), changes.prior.rows={self.prior_rows}")

    # -- rows -----------------------------------------------------------------------------------------------------
    def identity(self, row: Mapping[str, Any]) -> Identity:
        return tuple(row[c] for c in self.identity_columns)

    def key_row(self, i: int) -> Row:
        """The identity columns of key number ``i`` of the key pool: key columns from ``i``, a partition column
        outside the key from a hash of ``i`` (a key always lands in the same partition, as a writer's would)."""
        row: Row = {}
        for c in self.columns:
            if c.name in self.partition_by:
                row[c.name] = _partition_value(c.type, i * 31 + 7 * self.columns.index(c) if c.role == "key"
                                               else (i * 2654435761) >> 7)
            elif c.role == "key":
                row[c.name] = key_value(c.type, i, self.primary_key.index(c.name))
        return row

    def rows(self, rng: np.random.Generator, keys: Sequence[int], tag: str) -> list[Row]:
        """Full rows for key numbers ``keys``: value columns random (nulls in nullable ones), text columns drawn
        from a few values; ``tag`` goes into a text value column so that every write is told apart."""
        out = []
        for n, i in enumerate(keys):
            row = self.key_row(int(i))
            for c in self.columns:
                if c.name in row:
                    continue
                if c.nullable and rng.random() < 0.15:
                    row[c.name] = None
                elif c.role == "text":
                    row[c.name] = str(rng.choice(TEXT_VALUES))
                else:
                    row[c.name] = random_value(c.type, rng, f"{tag}-{n}")
            out.append(row)
        return canonical(self, out)

    def keys_only(self, rows: Iterable[Mapping[str, Any]]) -> list[Row]:
        """The identity columns of ``rows`` (what a delete takes)."""
        return [{c: r[c] for c in self.identity_columns} for r in rows]

    def batch(self, rows: Sequence[Mapping[str, Any]], columns: Sequence[str] | None = None) -> pa.Table:
        names = list(columns or self.schema.names)
        schema = pa.schema([self.schema.field(c) for c in names])
        return pa.Table.from_pylist([{c: r[c] for c in names} for r in rows], schema=schema)


def canonical(shape: Shape, rows: Sequence[Mapping[str, Any]]) -> list[Row]:
    """``rows`` as a table of ``shape`` reads them back (float32 rounded, time zones as Arrow gives them)."""
    return shape.batch(rows).to_pylist()


def key_value(typ: str, i: int, position: int = 0) -> Any:
    """Key number ``i`` as a value of ``typ``: distinct for distinct ``i`` (bool: for two), negative ones too,
    text with non-ASCII characters, binary with zero bytes; ``position`` varies the mapping per key column."""
    j = i + 3 * position
    if typ == "int8":
        return (j * 37) % 251 - 125
    if typ in ("int16", "int32"):
        return (j - 40) * (7919 if typ == "int32" else 97)
    if typ == "int64":
        return (j - 40) * 1_000_000_007_001
    if typ == "string":
        return f"{'kΩé'[j % 3]}-{j:05d}"
    if typ == "binary":
        return bytes([j % 3, 0, (j * 7) % 256, 255]) + j.to_bytes(2, "big")
    if typ == "date":
        return dt.date(2021, 1, 1) + dt.timedelta(days=j * 37 - 900)
    if typ == "timestamp":
        return dt.datetime(2024, 3, 1) + dt.timedelta(seconds=j * 3607 - 50_000, microseconds=j)
    if typ == "timestamp_tz":
        return dt.datetime(2024, 3, 31, 0, 30, tzinfo=dt.UTC) + dt.timedelta(seconds=j * 1801, microseconds=j * 3)
    if typ == "bool":
        return j % 2 == 1
    raise ValueError(f"not a key type: {typ}")


PARTITION_VALUES: dict[str, tuple[Any, ...]] = {
    "string": ("eu", "us west", "a/b=c%"),
    "int32": (-1, 0, 7),
    "int64": (20240101, -5, 9_000_000_000),
    "date": (dt.date(2024, 1, 1), dt.date(2024, 2, 29), dt.date(1999, 12, 31)),
}


def _partition_value(typ: str, i: int) -> Any:
    values = PARTITION_VALUES[typ]
    return values[i % len(values)]


def random_value(typ: str, rng: np.random.Generator, tag: str) -> Any:
    if typ in ("int32", "int64", "int16", "int8"):
        bound = {"int8": 127, "int16": 30_000, "int32": 2_000_000_000, "int64": 9_000_000_000_000}[typ]
        return int(rng.integers(-bound, bound))
    if typ in ("float32", "float64"):
        return float(np.round(rng.normal(0, 1e3), 3))
    if typ == "string":
        return tag
    if typ == "bool":
        return bool(rng.random() < 0.5)
    if typ == "date":
        return dt.date(2020, 1, 1) + dt.timedelta(days=int(rng.integers(0, 2000)))
    if typ == "timestamp":
        return dt.datetime(2023, 1, 1) + dt.timedelta(microseconds=int(rng.integers(0, 10**12)))
    if typ == "timestamp_tz":
        return dt.datetime(2023, 1, 1, tzinfo=dt.UTC) + dt.timedelta(microseconds=int(rng.integers(0, 10**12)))
    if typ == "binary":
        return tag.encode() + bytes([int(rng.integers(0, 256))])
    raise ValueError(typ)


# -- drawing shapes -----------------------------------------------------------------------------------------------


def build(name: str, keys: Sequence[tuple[str, str]], partitions: Sequence[tuple[str, str]], *,
          key_partitions: Sequence[str] = (), order: Sequence[str] | None = None, values: int = 2, texts: int = 1,
          buckets: int = 2, prior_rows: str = "false", nullable_values: bool = True,
          properties: Mapping[str, str] | None = None) -> Shape:
    """A shape from its parts: ``keys`` (name, type) are key columns that are not partition columns,
    ``partitions`` (name, type) partition columns, of which ``key_partitions`` are in the primary key too;
    ``order`` is the primary key's column order (default: the key columns, then the key partitions)."""
    cols: list[Column] = []
    for n, t in keys:
        cols.append(Column(n, t, False, "key"))
    for n, t in partitions:
        cols.append(Column(n, t, False, "key" if n in key_partitions else "partition"))
    for i in range(values):
        cols.append(Column(f"v{i}", VALUE_TYPES[i % len(VALUE_TYPES)], nullable_values, "value"))
    for i in range(texts):
        cols.append(Column(f"t{i}", "string", nullable_values and i % 2 == 1, "text"))
    pk = tuple(order) if order is not None else (*(n for n, _ in keys), *key_partitions)
    return Shape(name, tuple(cols), pk, tuple(n for n, _ in partitions), buckets, prior_rows, dict(properties or {}))


def random_shape(rng: np.random.Generator, name: str = "random") -> Shape:
    """A shape drawn at random from every dimension the format allows (see the module docstring)."""
    n_parts = int(rng.choice([0, 1, 1, 2]))
    partitions = [(f"p{i}", str(rng.choice(PARTITION_TYPES))) for i in range(n_parts)]
    in_key = [p for p, _ in partitions if rng.random() < 0.5]
    n_keys = int(rng.integers(1, 4)) - len(in_key)
    n_keys = max(n_keys, 0 if in_key else 1)
    keys = [(f"k{i}", str(rng.choice(KEY_TYPES))) for i in range(n_keys)]
    if keys and all(t == "bool" for _, t in keys) and not in_key:  # a key of two values holds two rows
        keys[0] = (keys[0][0], "int32")
    order = [n for n, _ in keys] + in_key
    rng.shuffle(order)
    wide = rng.random() < 0.25
    return build(name, keys, partitions, key_partitions=in_key, order=order,
                 values=int(rng.integers(30, 40)) if wide else int(rng.integers(1, 5)),
                 texts=int(rng.integers(0, 3)), buckets=int(rng.choice([1, 2, 3, 4, 8, 16])),
                 prior_rows=str(rng.choice(PRIOR_ROWS)), nullable_values=bool(rng.random() < 0.8))


def shapes(*, narrow: bool = False) -> st.SearchStrategy[Shape]:
    """A hypothesis strategy of shapes: a seed drawn by hypothesis, the shape by :func:`random_shape` (so every
    dimension is drawn, and a failing example names its seed: ``shape-SEED``). ``narrow``: at most 8 columns,
    for tests whose examples would be slow with 30 and more."""
    def of(seed: int) -> Shape:
        shape = random_shape(np.random.default_rng(seed), f"shape-{seed}")
        if narrow and len(shape.columns) > 8:
            keep = [c for c in shape.columns if c.role in ("key", "partition") or c.name in ("v0", "v1", "t0")]
            shape = Shape(shape.name, tuple(keep), shape.primary_key, shape.partition_by, shape.buckets,
                          shape.prior_rows, shape.properties)
        return shape

    return st.integers(0, 2**32 - 1).map(of)


MATRIX: tuple[Shape, ...] = (
    build("int64 key, one string partition", [("id", "int64")], [("ds", "string")]),
    build("key (id, ds), partitioned by ds", [("id", "int64")], [("ds", "string")], key_partitions=["ds"]),
    build("key (ds, id), partitioned by ds", [("id", "int64")], [("ds", "string")], key_partitions=["ds"],
          order=["ds", "id"], prior_rows="true"),
    build("key (a, dt, b), date partition in the middle", [("a", "int32"), ("b", "string")], [("dt", "date")],
          key_partitions=["dt"], order=["a", "dt", "b"], prior_rows="lookup"),
    build("key of both partition columns and a string", [("name", "string")], [("region", "string"), ("day", "date")],
          key_partitions=["region", "day"], order=["region", "day", "name"], buckets=3),
    build("key of one partition column of two", [("id", "int16")], [("region", "string"), ("n", "int32")],
          key_partitions=["n"], order=["n", "id"], prior_rows="lookup"),
    build("unpartitioned int8 key", [("k", "int8")], [], buckets=1),
    build("unpartitioned int16 key, 16 buckets", [("k", "int16")], [], buckets=16, prior_rows="true"),
    build("int32 key, int partition", [("k", "int32")], [("p", "int64")], prior_rows="lookup"),
    build("string key, date partition", [("name", "string")], [("d", "date")]),
    build("binary key", [("blob", "binary")], [("ds", "string")], prior_rows="true"),
    build("date key", [("day", "date")], [], buckets=4),
    build("timestamp key, partition in key", [("at", "timestamp")], [("ds", "string")], key_partitions=["ds"],
          prior_rows="lookup"),
    build("timestamp_tz key", [("at", "timestamp_tz")], [("n", "int32")], buckets=3),
    build("bool and int64 key", [("flag", "bool"), ("id", "int64")], [], buckets=2),
    build("three-column key (string, int64, bool)", [("s", "string"), ("i", "int64"), ("b", "bool")],
          [("ds", "string")], prior_rows="true"),
    build("wide: 36 value columns", [("id", "int64")], [("ds", "string")], values=33, texts=3, buckets=4),
    build("wide, key with partition", [("id", "int32")], [("ds", "date")], key_partitions=["ds"], values=32,
          texts=2, prior_rows="true"),
    build("only NOT NULL values", [("id", "int64")], [("ds", "string")], nullable_values=False),
    build("many text columns", [("id", "int64")], [("p", "int32")], values=1, texts=6, prior_rows="lookup"),
    build("two partitions, none in the key", [("id", "int64")], [("a", "string"), ("b", "int32")], buckets=3),
    build("key (int8 partition-free, ts) 8 buckets", [("k", "int8"), ("at", "timestamp_tz")], [], buckets=8,
          prior_rows="lookup"),
)
"""Named shapes every engine is checked on (tests/execution/test_shape_matrix.py)."""


# -- the oracle ---------------------------------------------------------------------------------------------------


@dataclass
class Oracle:
    """The rows of every version of a table of ``shape``: the operations applied in version order.

    The schema may gain nullable columns (:meth:`add_columns`, docs/format.md "Schema evolution"): from that
    version on every row has them, null where the row was written before or by a writer that left them out;
    the versions before keep the columns they had."""

    shape: Shape
    rows: dict[Identity, Row] = field(default_factory=dict)
    versions: dict[int, dict[Identity, Row]] = field(default_factory=lambda: {0: {}})
    names: tuple[str, ...] = ()
    """The columns of the current schema (the shape's, then the added ones)."""
    schemas: dict[int, tuple[str, ...]] = field(default_factory=dict)
    """The columns of the schema of each version committed."""

    def __post_init__(self) -> None:
        self.names = self.names or tuple(self.shape.schema.names)
        self.schemas.setdefault(0, self.names)

    def add_columns(self, names: Iterable[str]) -> None:
        """Add columns to the schema of the next commit: every row reads them as nulls until written."""
        self.names = (*self.names, *(n for n in names if n not in self.names))
        self.rows = {k: self._fit(r) for k, r in self.rows.items()}

    def _fit(self, row: Mapping[str, Any]) -> Row:
        """``row`` with the current columns: the ones it was written without as nulls."""
        return {c: row.get(c) for c in self.names}

    def upsert(self, version: int, rows: Iterable[Mapping[str, Any]]) -> None:
        for r in rows:
            self.rows[self.shape.identity(r)] = self._fit(r)
        self.commit(version)

    def delete(self, version: int, keys: Iterable[Mapping[str, Any]]) -> None:
        for k in keys:
            self.rows.pop(self.shape.identity(k), None)
        self.commit(version)

    def changes(self, version: int, rows: Iterable[Mapping[str, Any]], ops: Sequence[int]) -> None:
        """A batch of upserts (op 0) and deletes (op 1), in order."""
        for r, op in zip(rows, ops, strict=True):
            if op:
                self.rows.pop(self.shape.identity(r), None)
            else:
                self.rows[self.shape.identity(r)] = self._fit(r)
        self.commit(version)

    def overwrite(self, version: int, rows: Sequence[Mapping[str, Any]], partition: Mapping[str, Any] | None) -> None:
        for k in [k for k, r in self.rows.items() if partition is None
                  or all(r[c] == v for c, v in partition.items())]:
            del self.rows[k]
        self.upsert(version, rows)

    def unchanged(self, version: int) -> None:
        self.commit(version)

    def commit(self, version: int) -> None:
        self.versions[version] = dict(self.rows)
        self.schemas[version] = self.names

    def state(self, version: int) -> dict[Identity, Row]:
        return self.versions[max(v for v in self.versions if v <= version)]

    def columns(self, version: int) -> tuple[str, ...]:
        """The columns a read of ``version`` returns (its schema then)."""
        return self.schemas[max(v for v in self.schemas if v <= version)]

    def mismatch(self, version: int, got: Sequence[Mapping[str, Any]], columns: Sequence[str] | None = None
                 ) -> str | None:
        """What differs between the rows a read of ``version`` returned (and its ``columns``, when given) and
        the oracle's (None: nothing)."""
        if columns is not None and tuple(columns) != self.columns(version):
            return f"version {version}: columns {list(columns)}, expected {list(self.columns(version))}"
        want = self.state(version)
        found = {self.shape.identity(r): dict(r) for r in got}
        if len(found) != len(got):
            return f"version {version}: {len(got) - len(found)} duplicate row(s) of one key"
        return _diff(found, want, f"version {version}")

    def diff(self, start: int, end: int) -> dict[Identity, tuple[str, Row]]:
        """The net change from ``start`` to ``end``: identity -> (kind, the row after, or before a delete), in
        the columns of ``end`` (a row of ``start`` lacks the ones added between: nulls, which are no change)."""
        names = self.columns(end)
        a = {k: {c: r.get(c) for c in names} for k, r in self.state(start).items()}
        b = self.state(end)
        out: dict[Identity, tuple[str, Row]] = {}
        for k in a.keys() | b.keys():
            if k not in a:
                out[k] = ("insert", b[k])
            elif k not in b:
                out[k] = ("delete", a[k])
            elif a[k] != b[k]:
                out[k] = ("update", b[k])
        return out

    def feed_mismatch(self, start: int, end: int, feed: pa.Table) -> str | None:
        """What differs between ``Table.changes(start, end)`` and the oracle's net change (None: nothing): its
        columns are those of ``end``'s schema and ``_change``, ``_change_version``."""
        names = self.columns(end)
        if tuple(feed.column_names) != (*names, "_change", "_change_version"):
            return f"changes({start}, {end}): columns {feed.column_names}, expected {[*names, '_change', '...']}"
        got = {self.shape.identity(r): (r["_change"], {c: r[c] for c in names}) for r in feed.to_pylist()}
        if len(got) != feed.num_rows:
            return f"changes({start}, {end}): a key reported twice"
        return _diff(got, self.diff(start, end), f"changes({start}, {end})")


def _diff(got: Mapping[Identity, Any], want: Mapping[Identity, Any], what: str) -> str | None:
    if got == want:
        return None
    extra = sorted(set(got) - set(want), key=repr)[:3]
    lost = sorted(set(want) - set(got), key=repr)[:3]
    changed = sorted((k for k in set(got) & set(want) if got[k] != want[k]), key=repr)[:2]
    return (f"{what}: {len(got)} rows against {len(want)} expected; unexpected {extra}, missing {lost}, "
            f"changed {[(k, got[k], want[k]) for k in changed]}")


__all__ = ["KEY_TYPES", "MATRIX", "PARTITION_TYPES", "PRIOR_ROWS", "Column", "Oracle", "Shape", "build",
           "canonical", "key_value", "random_shape", "shapes"]
