"""Partition values as text (docs/format.md, "Partition values as text").

A partition is named by the text of its values. :func:`partition_values` is the writer's encoding of a batch's
partition columns: Arrow's cast to ``string`` of the values in the table's types. :func:`partition_text` is the
same encoding of one value a user gives for a partition column (an overwrite's partition, a PURGE's partition
filter), so that a value names the partition a row holding it is written to. :func:`partition_value` reads a
partition's text back into the value it names, for every value the writer writes (years before 1000 and after
9999, which Arrow's parser does not read in this form, included).
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from maintd.errors import InvalidInputError
from maintd.table.files.lazy import lazy_module
from maintd.table.files.schema import TYPES

if TYPE_CHECKING:
    import pyarrow.compute as pc
else:
    pc = lazy_module("pyarrow.compute")  # imported by the first call: see maintd.table.files.lazy

_EPOCH = dt.date(1970, 1, 1)
_DAYS_PER_400_YEARS = 146_097
_US_PER_DAY = 86_400_000_000
_TEXT_FORM = re.compile(r"(-?\d{4,})-(\d\d)-(\d\d)(?: (\d\d):(\d\d):(\d\d)\.(\d{6})(Z?))?")
_EXPECTED = {
    "bool": ("a bool", "true"),
    "int8": ("an int from -128 to 127", "42"),
    "int16": ("an int from -32768 to 32767", "42"),
    "int32": ("an int from -2147483648 to 2147483647", "42"),
    "int64": ("an int from -9223372036854775808 to 9223372036854775807", "42"),
    "string": ("a str", ""),
    "binary": ("bytes (UTF-8 text) or a str", "abc"),
    "date": ("a datetime.date", "2024-01-01"),
    "timestamp": ("a datetime.datetime or datetime.date (an aware one is taken at its UTC time)",
                  "2024-01-01 00:00:00.000000"),
    "timestamp_tz": ("a datetime.datetime or datetime.date (a naive one is taken as UTC)",
                     "2024-01-01 00:00:00.000000Z"),
}


def partition_values(data: pa.Table, partition_by: Sequence[str]) -> list[pa.Array]:
    """Each partition column's values as the text that names a partition.

    Raises:
        InvalidInputError: a binary partition value is not UTF-8 text (a partition is named by its text).
    """
    out = []
    for c in partition_by:
        col = data.column(c)
        try:
            out.append(pc.cast(col, pa.string()).combine_chunks())
        except pa.ArrowInvalid as exc:
            raise InvalidInputError(
                f"partition column {c!r} holds a value that is not UTF-8 text ({exc}); a partition is named by "
                "its value as text, so binary partition values must be UTF-8: encode them (hex, base64) first"
            ) from exc
    return out


def partition_text(column: str, type_name: str, value: Any, *, table: str) -> str:
    """The text of the partition a row is written to when its partition column ``column`` (of maintd type
    ``type_name``) holds ``value``: the writer's own encoding (:func:`partition_values`).

    ``value`` is a value of the column's type (``bool``, ``int``, ``str``, ``bytes``, ``datetime.date``,
    ``datetime.datetime`` or a date for its midnight, their numpy scalars), or text. A ``str`` is read as the
    writer reads a text column of that type (``"1"`` on a ``bool`` column is ``true``), so the partition's own
    text is always accepted.

    Raises:
        InvalidInputError: ``value`` is None or cannot be a value of the column (another type, out of range,
            text that does not parse), naming the column, the value, its type and the forms it takes.
    """
    def refuse(reason: str = "") -> InvalidInputError:
        expected, example = _EXPECTED[type_name]
        forms = "a str: the partition's text" if type_name == "string" else (
            f"{expected}, or the partition's text (e.g. {example!r})")
        return InvalidInputError(
            f"table {table}: {value!r} ({type(value).__name__}) is not a value of partition column {column!r} "
            f"({type_name}){': ' + reason if reason else ''}; give {forms}"
        )

    typ = TYPES[type_name]
    if value is None:
        raise refuse("partition values are never null")
    arr = _text_value(value, type_name, typ) if isinstance(value, str) else _typed_value(value, type_name, typ)
    if arr is None:
        raise refuse()
    try:
        text = partition_values(pa.table({column: arr}), [column])[0][0].as_py()
    except InvalidInputError as exc:
        raise refuse("a partition is named by its value as UTF-8 text") from exc
    return str(text)


def partition_value(column: str, type_name: str, text: str | None, *, table: str) -> pa.Array:
    """The value a partition's text names, as a one-value array of the Arrow type of ``type_name`` (the column's
    maintd type): the inverse of :func:`partition_values`, exact for every text the writer writes, dates and
    timestamps of any year included. Text in another form is read as the writer reads a text column of that
    type (as :func:`partition_text` reads it), and a binary partition's text is its UTF-8 bytes. ``None`` (a
    null, which writers never write but the log's type admits) is a null of the type.

    Raises:
        InvalidInputError: ``text`` is no value of the type, naming the table, the column, the text and the type.
    """
    typ = TYPES[type_name]
    if text is None:
        return pa.nulls(1, typ)
    arr = _text_value(text, type_name, typ) if isinstance(text, str) else None
    if arr is None:
        raise InvalidInputError(
            f"table {table}: the partition text {text!r} of column {column!r} is not a value of its type "
            f"({type_name}); a partition is named by its value as text (docs/format.md, \"Partition values as "
            "text\")"
        )
    return arr.cast(typ) if arr.type != typ else arr


def _text_value(text: str, type_name: str, typ: pa.DataType) -> pa.Array | None:
    """``text`` as a one-value array of ``typ``, or None when it is no value of it."""
    if type_name in ("string", "binary"):
        return pa.array([text], pa.string())  # a binary partition is named by its bytes as UTF-8 text
    try:
        return pa.array([text], pa.string()).cast(typ)  # as the writer casts a text column to the column's type
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return _text_beyond_parser(text, type_name, typ)


def _text_beyond_parser(text: str, type_name: str, typ: pa.DataType) -> pa.Array | None:
    """A date or timestamp in the partition text form whose year Arrow's parser does not read (before year 0 or
    after 9999), as a one-value array of ``typ``; None for anything else."""
    m = _TEXT_FORM.fullmatch(text)
    if m is None or type_name not in ("date", "timestamp", "timestamp_tz"):
        return None
    has_time, zulu = m.group(4) is not None, m.group(8) == "Z"
    if has_time != (type_name != "date") or zulu != (type_name == "timestamp_tz"):
        return None
    year, month, day = int(m.group(1)), int(m.group(2)), int(m.group(3))
    try:  # the proleptic Gregorian calendar repeats every 400 years
        days = ((dt.date(2000 + year % 400, month, day) - _EPOCH).days
                + (year // 400 - 5) * _DAYS_PER_400_YEARS)
    except ValueError:
        return None
    if not has_time:
        return _array_of(days, pa.int32(), typ)
    hour, minute, second, micros = (int(m.group(i)) for i in (4, 5, 6, 7))
    if hour > 23 or minute > 59 or second > 59:
        return None
    return _array_of(days * _US_PER_DAY + ((hour * 60 + minute) * 60 + second) * 1_000_000 + micros,
                     pa.int64(), typ)


def _array_of(number: int, storage: pa.DataType, typ: pa.DataType) -> pa.Array | None:
    try:
        return pa.array([number], storage).cast(typ)
    except (pa.ArrowInvalid, OverflowError):
        return None


def _typed_value(value: Any, type_name: str, typ: pa.DataType) -> pa.Array | None:
    """A Python (or numpy) value of the column's type as a one-value array of ``typ``, or None when it is not
    one (another type, or out of the type's range)."""
    if isinstance(value, np.datetime64):
        value = _from_datetime64(value)
    elif isinstance(value, np.generic):
        value = value.item()
    if type_name == "bool":
        ok = isinstance(value, bool)
    elif type_name.startswith("int"):
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif type_name == "binary":
        ok = isinstance(value, bytes | bytearray | memoryview)
        value = bytes(value) if ok else value
    elif type_name == "date":
        ok = isinstance(value, dt.date) and not isinstance(value, dt.datetime)
    elif type_name in ("timestamp", "timestamp_tz"):
        ok = isinstance(value, dt.date)
        if ok and not isinstance(value, dt.datetime):
            value = dt.datetime.combine(value, dt.time())  # a date is its midnight, as the writer casts a date
    else:  # string: only a str, read as text
        ok = False
    if not ok:
        return None
    try:
        return pa.array([value], typ)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError, ValueError):
        return None


def _from_datetime64(value: np.datetime64) -> Any:
    """A numpy datetime as a ``datetime.date`` (a unit of a day or more) or ``datetime.datetime``; None for NaT
    or a value finer than a microsecond or outside Python's years."""
    if np.isnat(value):
        return None
    unit = np.datetime_data(value.dtype)[0]
    if unit in ("Y", "M", "W", "D"):
        out = value.astype("datetime64[D]").item()
        return out if isinstance(out, dt.date) else None
    micros = value.astype("datetime64[us]")
    out = micros.item()
    return out if micros == value and isinstance(out, dt.datetime) else None
