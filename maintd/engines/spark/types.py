"""maintd column types in Spark, and the checks a DataFrame's schema passes before a write starts.

The mapping is one to one (``docs/format.md``, "Types and schema"): ``timestamp`` is Spark's ``TIMESTAMP_NTZ``
and ``timestamp_tz`` (UTC) is Spark's ``TIMESTAMP``. A write accepts a DataFrame column of the
table's type or of a narrower one that converts exactly (``int`` into ``bigint``, ``float`` into
``double``); anything else is refused on the driver, before any task writes a file.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from pyspark.sql import types as T

from maintd.errors import InvalidInputError, PrimaryKeyError, SchemaMismatchError
from maintd.table.log.actions import Field_, Metadata

SPARK_TYPES: dict[str, T.DataType] = {
    "bool": T.BooleanType(),
    "int8": T.ByteType(),
    "int16": T.ShortType(),
    "int32": T.IntegerType(),
    "int64": T.LongType(),
    "float32": T.FloatType(),
    "float64": T.DoubleType(),
    "string": T.StringType(),
    "binary": T.BinaryType(),
    "date": T.DateType(),
    "timestamp": T.TimestampNTZType(),
    "timestamp_tz": T.TimestampType(),
}
_INTEGERS = ("int8", "int16", "int32", "int64")
WIDENS_TO: dict[str, tuple[str, ...]] = {
    "int8": (*_INTEGERS[1:], "float32", "float64"),
    "int16": (*_INTEGERS[2:], "float32", "float64"),
    "int32": ("int64", "float64"),
    "float32": ("float64",),
}
"""For a DataFrame column of the key's type, the other table column types it is written into exactly."""


def spark_type_name(t: T.DataType) -> str | None:
    """The maintd type of a Spark type, or None when maintd has none (decimal, arrays, ...)."""
    for name, st in SPARK_TYPES.items():
        if type(st) is type(t):
            return name
    return None


def fields_from_spark(schema: T.StructType, *, primary_key: Iterable[str], uri: str,
                      leave_out: Iterable[str] = ()) -> tuple[Field_, ...]:
    """The columns of a table created from a DataFrame's schema (``leave_out``: the operation column). Key
    columns are NOT NULL whatever Spark says of them (Spark's columns are nullable unless proven otherwise; a
    null key is refused row by row by the write).

    Raises:
        SchemaMismatchError: a column of a type maintd has no counterpart for, naming it and the types there are.
    """
    keys, skip = set(primary_key), set(leave_out)
    fields, bad = [], []
    for f in schema.fields:
        if f.name in skip:
            continue
        name = spark_type_name(f.dataType)
        if name is None:
            bad.append(f"{f.name} ({f.dataType.simpleString()})")
            continue
        fields.append(Field_(name=f.name, type=name, nullable=f.nullable and f.name not in keys))
    if bad:
        raise SchemaMismatchError(f"table {uri}: cannot create the table from this DataFrame: column(s) "
                                  f"{', '.join(bad)} have no maintd type; the types are "
                                  f"{', '.join(t.simpleString() for t in SPARK_TYPES.values())}")
    return tuple(fields)


def spark_schema(fields: Iterable[Field_]) -> T.StructType:
    return T.StructType([T.StructField(f.name, SPARK_TYPES[f.type], f.nullable) for f in fields])


def table_schema(metadata: Metadata, columns: Iterable[str] | None = None) -> T.StructType:
    """The Spark schema of a table (or of some of its columns, in the order given)."""
    by_name = {f.name: f for f in metadata.fields}
    return spark_schema(by_name[c] for c in (columns if columns is not None else metadata.column_names))


def check_read_schema(schema: T.StructType, metadata: Metadata, *, uri: str) -> tuple[str, ...]:
    """The columns a user-given read schema selects; each must be a table column of the same type."""
    by_name = {f.name: f for f in metadata.fields}
    problems = []
    for f in schema.fields:
        col = by_name.get(f.name)
        if col is None:
            problems.append(f"{f.name} is not a column of the table")
        elif type(SPARK_TYPES[col.type]) is not type(f.dataType):
            problems.append(f"{f.name} is {SPARK_TYPES[col.type].simpleString()} in the table, "
                            f"not {f.dataType.simpleString()}")
    if problems:
        raise SchemaMismatchError(
            f"table {uri}: the read schema does not fit the table ({'; '.join(problems)}); give a subset of "
            f"{table_schema(metadata).simpleString()}, or no schema"
        )
    return tuple(f.name for f in schema.fields)


def check_write_schema(schema: T.StructType, metadata: Metadata, *, uri: str, op_column: str | None) -> None:
    """Refuse a DataFrame that cannot be written to the table, naming every column at fault.

    Raises:
        PrimaryKeyError: a primary-key or partition column is missing.
        SchemaMismatchError: unknown columns, missing NOT NULL columns, types that do not convert,
            or an operation column that is missing or not an integer.
    """
    given = {f.name: f for f in schema.fields}
    if op_column is not None:
        op = given.pop(op_column, None)
        if op is None:
            raise SchemaMismatchError(f"table {uri}: the DataFrame has no column {op_column!r} (opColumn); "
                                      f"its columns are {', '.join(schema.fieldNames())}")
        if spark_type_name(op.dataType) not in (*_INTEGERS, "bool"):
            raise SchemaMismatchError(f"table {uri}: opColumn {op_column!r} is {op.dataType.simpleString()}; it must "
                                      "be an integer, 0 for an upsert and 1 for a delete")
    keys = list(dict.fromkeys([*metadata.primary_key, *metadata.partition_by]))
    missing_keys = [k for k in keys if k not in given]
    if missing_keys:
        raise PrimaryKeyError(
            f"table {uri}: the DataFrame lacks key column(s) {', '.join(missing_keys)} (primary key "
            f"{', '.join(metadata.primary_key)}"
            + (f", partition columns {', '.join(metadata.partition_by)}" if metadata.partition_by else "") + ")"
            + _case_hint(missing_keys, given)
        )
    problems = _column_problems(given, metadata, set(keys))
    if problems:
        raise SchemaMismatchError(
            f"table {uri}: the DataFrame does not fit the table schema: {'; '.join(problems)}. The table is "
            f"{table_schema(metadata).simpleString()}; select and cast the columns to match"
        )


def _column_problems(given: dict[str, T.StructField], metadata: Metadata, keys: set[str]) -> list[str]:
    by_name = {f.name: f for f in metadata.fields}
    problems = [f"{c} is not a column of the table{_case_hint([c], by_name)}" for c in given if c not in by_name]
    for f in metadata.fields:
        g = given.get(f.name)
        if g is None and f.added:
            continue  # added after the table was created: a writer that does not know it yet writes nulls
        if g is None:  # as Table.upsert: a missing column would silently set it to null on every row
            problems.append(f"{f.name} ({SPARK_TYPES[f.type].simpleString()}) is missing (use lit(None) for nulls)")
            continue
        have = spark_type_name(g.dataType)
        if isinstance(g.dataType, T.NullType) and f.name not in keys:
            continue  # a column of nulls (lit(None)) fits any nullable column; NOT NULL is checked per row
        if have != f.type and f.type not in WIDENS_TO.get(have or "", ()):
            problems.append(f"{f.name} is {g.dataType.simpleString()} but the table has "
                            f"{SPARK_TYPES[f.type].simpleString()}")
    return problems


def columns_to_merge(schema: T.StructType, metadata: Metadata, *, uri: str, leave_out: Iterable[str] = ()
                     ) -> tuple[Field_, ...]:
    """The DataFrame's columns the table lacks, as nullable columns to add in the write's commit (``mergeSchema``).

    Raises:
        SchemaMismatchError: such a column has a type maintd has no counterpart for (a column of nulls,
            ``lit(None)``, included: cast it to the type it is to have).
    """
    known = {*metadata.column_names, *leave_out}
    out, problems = [], []
    for f in schema.fields:
        if f.name in known:
            continue
        name = spark_type_name(f.dataType)
        if name is None:
            problems.append(f"{f.name} is {f.dataType.simpleString()}")
        else:
            out.append(Field_(name=f.name, type=name, nullable=True))
    if problems:
        raise SchemaMismatchError(
            f"table {uri}: mergeSchema cannot add column(s) of no maintd type ({'; '.join(problems)}); cast them to "
            f"one of {', '.join(sorted({st.simpleString() for st in SPARK_TYPES.values()}))}")
    return tuple(out)


def _case_hint(names: Iterable[str], available: Iterable[str]) -> str:
    lower = {a.lower(): a for a in available}
    hits = [f"{n!r} vs {lower[n.lower()]!r}" for n in names if n.lower() in lower and lower[n.lower()] != n]
    return f" (column names are case-sensitive: {', '.join(hits)})" if hits else ""


def parse_int_option(options: Mapping[str, str], key: str, *, uri: str) -> int | None:
    raw = options.get(key)
    if raw is None or str(raw).strip() == "":
        return None
    try:
        return int(str(raw).strip())
    except ValueError:
        raise InvalidInputError(f"table {uri}: option {key}={raw!r} is not an integer") from None
