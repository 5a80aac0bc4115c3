"""Schema evolution: the columns a table may gain, and reading data files written before it gained them.

Only nullable value columns can be added (docs/format.md, "Schema evolution"). A column added later is marked
``added`` in the metadata: data files written before lack it, and so may a writer's batch, and both read as
nulls. Nothing else about a column may change. Dropping or renaming one would orphan the values older files
hold, and a new type would make older files disagree with the schema (widening included: maintd's readers take
a file's columns at the schema's types). Key, partition and NOT NULL columns are what rows are identified
and bucketed by, which files written before cannot be made to satisfy. Each such request is refused with
:class:`~maintd.errors.SchemaEvolutionError` naming the column and what to do instead.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import pyarrow as pa

from maintd.errors import SchemaEvolutionError
from maintd.table.files.schema import TYPES, arrow_type_name, check_fields, type_name
from maintd.table.log.actions import Field_, Metadata

_INSTEAD = ("create a new table with the schema you want and copy the rows into it (maintd changes a schema "
            "only by adding nullable columns)")


def parse_columns_spec(spec: str, *, table: str) -> tuple[Field_, ...]:
    """The columns of ``'name:type,...'`` to add; ``!`` (NOT NULL) is refused, an unknown type named."""
    out = []
    for part in spec.split(","):
        if not part.strip():
            continue
        if ":" not in part:
            raise SchemaEvolutionError(f"table {table}: column {part.strip()!r} must be name:type, e.g. 'note:string'")
        name, typ = (p.strip() for p in part.split(":", 1))
        if typ.endswith("!"):
            raise SchemaEvolutionError(
                f"table {table}: column {name!r} cannot be added NOT NULL ({typ!r}): the rows written before have no "
                f"value for it. Add it nullable ('{name}:{typ.rstrip('!')}') and fill it with writes")
        try:
            out.append(Field_(name=name, type=type_name(typ), nullable=True))
        except ValueError as exc:
            raise SchemaEvolutionError(f"table {table}: column {name!r}: {exc}") from None
    if not out:
        raise SchemaEvolutionError(f"table {table}: no column to add; give name:type[,name:type...]")
    return tuple(out)


def fields_of(columns: str | pa.Schema | pa.Field | Iterable[Field_ | pa.Field], *, table: str
              ) -> tuple[Field_, ...]:
    """Columns to add given as a spec string, an Arrow schema or field(s), or :class:`Field_` s."""
    if isinstance(columns, str):
        return parse_columns_spec(columns, table=table)
    items = [columns] if isinstance(columns, pa.Field) else list(columns)
    out = []
    for c in items:
        if isinstance(c, Field_):
            out.append(c)
            continue
        if not isinstance(c, pa.Field):
            raise SchemaEvolutionError(f"table {table}: a column to add must be a pyarrow.Field, a maintd Field_ or "
                                       f"a 'name:type' string, got {type(c).__name__}")
        try:
            out.append(Field_(name=c.name, type=arrow_type_name(c.type), nullable=c.nullable))
        except ValueError as exc:
            raise SchemaEvolutionError(f"table {table}: column {c.name!r}: {exc}") from None
    return tuple(out)


def add_columns(metadata: Metadata, new: Sequence[Field_], *, table: str) -> Metadata:
    """``metadata`` with ``new`` appended as added, nullable columns.

    Raises:
        SchemaEvolutionError: nothing to add, a column that exists (naming its type), a NOT NULL column,
            a key or partition column, or a name the schema does not allow.
    """
    if not new:
        raise SchemaEvolutionError(f"table {table}: no column to add")
    by_name = {f.name: f for f in metadata.fields}
    for f in new:
        old = by_name.get(f.name)
        if f.name in metadata.primary_key or f.name in metadata.partition_by:
            raise SchemaEvolutionError(
                f"table {table}: column {f.name!r} is a key or partition column; the primary key and the "
                f"partitioning are fixed at create, and added columns are value columns: {_INSTEAD}")
        if old is not None:
            what = "the same type" if old.type == f.type else f"type {old.type}, not {f.type}"
            raise SchemaEvolutionError(
                f"table {table}: column {f.name!r} exists already (with {what}); choose another name. Changing a "
                f"column's type (widening too), dropping or renaming a column is not supported: {_INSTEAD}")
        if not f.nullable:
            raise SchemaEvolutionError(
                f"table {table}: column {f.name!r} cannot be added NOT NULL: the rows written before have no value "
                "for it. Add it nullable and fill it with writes")
        if f.type not in TYPES:
            raise SchemaEvolutionError(f"table {table}: column {f.name!r} has unknown type {f.type!r}; use one of "
                                       f"{', '.join(TYPES)}")
    added = tuple(Field_(name=f.name, type=f.type, nullable=True, added=True) for f in new)
    try:
        fields = check_fields((*metadata.fields, *added))
    except ValueError as exc:
        raise SchemaEvolutionError(f"table {table}: {exc}") from None
    return metadata.model_copy(update={"fields": fields})


def columns_to_merge(metadata: Metadata, schema: pa.Schema, *, table: str) -> tuple[Field_, ...]:
    """The columns of ``schema`` (a write's data) that the table lacks, as nullable columns to add in the write's
    commit (``merge_schema``); columns the table has keep their types (the data is cast to them, as always)."""
    known = set(metadata.column_names)
    return fields_of([f.with_nullable(True) for f in schema if f.name not in known], table=table)


def fill_missing(t: pa.Table, expected: pa.Schema, names: Sequence[str]) -> pa.Table:
    """``t`` with columns ``names`` in that order, each column it lacks as nulls of ``expected``'s type: the
    columns added to the schema after the file ``t`` was read from was written."""
    have = set(t.column_names)
    if all(n in have for n in names):
        return t.select(list(names))
    cols = [t.column(n) if n in have else pa.nulls(t.num_rows, expected.field(n).type) for n in names]
    fields = [t.schema.field(n) if n in have else expected.field(n).with_nullable(True) for n in names]
    return pa.Table.from_arrays(cols, schema=pa.schema(fields))


def added_columns(metadata: Metadata) -> frozenset[str]:
    """The columns added after the table was created: the ones a data file may lack."""
    return frozenset(f.name for f in metadata.fields if f.added)


__all__ = ["add_columns", "added_columns", "columns_to_merge", "fields_of", "fill_missing", "parse_columns_spec"]
