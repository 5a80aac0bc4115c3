"""Table schemas: maintd type names, their Arrow types, and the hidden columns of data files."""

from __future__ import annotations

from collections.abc import Iterable

import pyarrow as pa

from maintd.errors import InvalidInputError, SchemaMismatchError
from maintd.table.log.actions import Field_

#: Row version of each row, in files written by merges (level >= 1 DeltaFiles and BaseFiles).
VERSION_COLUMN = "_maintd_version"
#: 0 = upsert row, 1 = delete row (DeltaFiles only; key columns set, others null).
OP_COLUMN = "_maintd_op"
OP_UPSERT = 0
OP_DELETE = 1
HIDDEN_COLUMNS = (VERSION_COLUMN, OP_COLUMN)

TYPES: dict[str, pa.DataType] = {
    "bool": pa.bool_(),
    "int8": pa.int8(),
    "int16": pa.int16(),
    "int32": pa.int32(),
    "int64": pa.int64(),
    "float32": pa.float32(),
    "float64": pa.float64(),
    "string": pa.string(),
    "binary": pa.binary(),
    "date": pa.date32(),
    "timestamp": pa.timestamp("us"),
    "timestamp_tz": pa.timestamp("us", tz="UTC"),
}
ALIASES = {"int": "int64", "long": "int64", "double": "float64", "float": "float32", "str": "string",
           "boolean": "bool", "date32": "date", "large_string": "string", "utf8": "string"}
KEY_TYPES = frozenset({"bool", "int8", "int16", "int32", "int64", "string", "binary", "date", "timestamp",
                       "timestamp_tz"})


def type_name(t: str) -> str:
    """Normalise a user-given type name; raises :class:`InvalidInputError` for an unknown one."""
    name = ALIASES.get(t.strip().lower(), t.strip().lower())
    if name not in TYPES:
        raise InvalidInputError(f"unknown column type {t!r}; use one of {', '.join(TYPES)}")
    return name


def arrow_type_name(t: pa.DataType) -> str:
    """The maintd type name of an Arrow type; raises :class:`InvalidInputError` if unsupported."""
    if pa.types.is_large_string(t) or pa.types.is_string(t):
        return "string"
    if pa.types.is_large_binary(t):
        return "binary"
    if pa.types.is_timestamp(t):
        return "timestamp_tz" if t.tz else "timestamp"
    for name, at in TYPES.items():
        if at == t:
            return name
    raise InvalidInputError(f"column type {t} is not supported; supported types: {', '.join(TYPES)}")


def parse_schema_spec(spec: str) -> tuple[Field_, ...]:
    """Parse ``'id:int64!,name:string,ds:string'`` (a trailing ``!`` marks NOT NULL)."""
    fields = []
    for part in spec.split(","):
        if not part.strip():
            continue
        if ":" not in part:
            raise InvalidInputError(f"schema entry {part.strip()!r} must be name:type, e.g. 'id:int64'")
        name, typ = (p.strip() for p in part.split(":", 1))
        nullable = not typ.endswith("!")
        fields.append(Field_(name=name, type=type_name(typ.rstrip("!")), nullable=nullable))
    return check_fields(fields)


def fields_from_arrow(schema: pa.Schema) -> tuple[Field_, ...]:
    return check_fields(Field_(name=f.name, type=arrow_type_name(f.type), nullable=f.nullable) for f in schema)


def check_fields(fields: Iterable[Field_]) -> tuple[Field_, ...]:
    out = tuple(fields)
    if not out:
        raise InvalidInputError("a schema needs at least one column")
    names = [f.name for f in out]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise InvalidInputError(f"duplicate column names in schema: {', '.join(dupes)}")
    for n in names:
        if n.startswith("_maintd_"):
            raise InvalidInputError(f"column {n!r}: names starting with '_maintd_' are reserved")
        if not n or "/" in n or "=" in n:
            raise InvalidInputError(f"column name {n!r} is not allowed (empty, or contains '/' or '=')")
    return out


def to_arrow(fields: Iterable[Field_]) -> pa.Schema:
    return pa.schema([pa.field(f.name, TYPES[f.type], nullable=f.nullable) for f in fields])


def conform(data: pa.Table, fields: tuple[Field_, ...], *, table: str, require: Iterable[str] | None = None
            ) -> pa.Table:
    """Cast ``data`` to the table schema (column order too); missing nullable columns become null.

    Every column is ``require`` d (default: all of them) except the columns added to the schema after the table
    was created (``Field_.added``): a writer that does not know them yet writes nulls there.

    Raises:
        SchemaMismatchError: unknown columns, missing required columns, or uncastable types.
    """
    target = to_arrow(fields)
    given = set(data.column_names)
    extra = sorted(given - set(target.names))
    if extra:
        raise SchemaMismatchError(
            f"table {table}: column(s) {', '.join(extra)} are not in the table schema "
            f"({', '.join(target.names)}); drop them, or add them to the table (Table.add_columns, "
            "maintd table add-columns, or write with merge_schema=True)"
        )
    required = set(require) if require is not None else {f.name for f in fields}
    added = {f.name for f in fields if f.added}
    cols = []
    for f in target:
        if f.name not in given:
            if (f.name in required and f.name not in added) or not f.nullable:  # added later: older writers lack it
                raise SchemaMismatchError(f"table {table}: column {f.name!r} ({f.type}) is missing from the data")
            cols.append(pa.nulls(data.num_rows, f.type))
            continue
        col = data.column(f.name)
        if col.type != f.type:
            try:
                col = col.cast(f.type)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                raise SchemaMismatchError(
                    f"table {table}: column {f.name!r} has type {col.type}, expected {f.type}: {exc}"
                ) from None
        if not f.nullable and col.null_count:
            raise SchemaMismatchError(f"table {table}: column {f.name!r} is NOT NULL but has {col.null_count} nulls")
        cols.append(col)
    return pa.Table.from_arrays(cols, schema=target)
