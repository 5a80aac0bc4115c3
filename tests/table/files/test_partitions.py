"""A partition a user names (an overwrite's ``partition``, a PURGE's filter) is the text the writer names it by
(docs/format.md, "Partition values as text"): a value of the column's type or that text names the partition a row
holding it is written to; anything else is refused naming the column, the value and the forms it takes. Keys of
type date or timestamp outside the years 1 to 9999 are refused before any file is written."""

from __future__ import annotations

import datetime as dt
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from maintd import InvalidInputError, Table
from maintd.reclaim import PartitionFilter
from maintd.reclaim.purge import plan_purge
from maintd.table.files.partitions import partition_text, partition_value, partition_values
from maintd.table.files.schema import KEY_TYPES, TYPES

from ..table_helpers import data_files_on_disk
from ..test_format_spec import arrow_array, doc_table, parse_value

UTC = dt.UTC
PLUS2 = dt.timezone(dt.timedelta(hours=2))

# type -> (value of the partition overwritten, value of the partition left alone, the first one's text)
PARTITIONS: dict[str, tuple[Any, Any, str]] = {
    "bool": (True, False, "true"),
    "int8": (-128, 5, "-128"),
    "int16": (300, 1, "300"),
    "int32": (-1, 2, "-1"),
    "int64": (-9223372036854775808, 9223372036854775807, "-9223372036854775808"),
    "string": ("a b/c=d%e", "é", "a b/c=d%e"),
    "binary": (b"abc", "é".encode(), "abc"),
    "date": (dt.date(2024, 1, 1), dt.date(1969, 12, 31), "2024-01-01"),
    "timestamp": (dt.datetime(2024, 1, 1, 12, 30, 5, 500000), dt.datetime(1969, 12, 31, 23, 59, 59, 999999),
                  "2024-01-01 12:30:05.500000"),
    "timestamp_tz": (dt.datetime(2024, 1, 1, 14, 30, 5, 500000, tzinfo=PLUS2), dt.datetime(2024, 1, 1, tzinfo=UTC),
                     "2024-01-01 12:30:05.500000Z"),
}


def test_every_partition_type_is_covered() -> None:
    assert set(PARTITIONS) == set(KEY_TYPES)


def _table(root: Path, type_name: str) -> Table:
    return Table.create(str(root / "t"), f"id:int64!,p:{type_name}!,v:string", primary_key=["id", "p"],
                        partition_by="p", buckets=2)


def _rows(table: Table) -> list[tuple[int, Any, str]]:
    return sorted((r["id"], r["p"], r["v"]) for r in table.read().to_pylist())


def _texts(table: Table) -> set[str | None]:
    return {f.partition["p"] for f in table.files()}


@pytest.mark.parametrize("type_name", sorted(PARTITIONS))
@pytest.mark.parametrize("form", ["value", "text"])
def test_an_overwrite_of_a_partition_named_by_its_value_or_its_text_replaces_that_partition_only(
        tmp_path: Path, type_name: str, form: str) -> None:
    mine, other, text = PARTITIONS[type_name]
    table = _table(tmp_path, type_name)
    table.upsert(pa.table({"id": [1, 2, 3], "p": pa.array([mine, mine, other], TYPES[type_name]),
                           "v": ["a", "b", "c"]}))
    assert text in _texts(table)
    before = _rows(table)
    version = table.overwrite(pa.table({"id": [7], "p": pa.array([mine], TYPES[type_name]), "v": ["new"]}),
                              partition={"p": mine if form == "value" else text})
    assert version == table.version
    kept = [r for r in before if r[0] == 3]
    assert _rows(table) == sorted([*kept, (7, before[0][1], "new")])
    assert len(_texts(table)) == 2 and text in _texts(table)


@pytest.mark.parametrize(("type_name", "value", "text"), [
    ("bool", np.bool_(False), "false"),
    ("bool", "True", "true"),  # read as the writer reads a text column of bools
    ("bool", "0", "false"),
    ("int8", np.int8(-3), "-3"),
    ("int32", np.int64(7), "7"),
    ("int64", "007", "7"),
    ("string", "", ""),
    ("string", np.str_("x"), "x"),
    ("binary", bytearray(b"abc"), "abc"),
    ("binary", memoryview(b"abc"), "abc"),
    ("binary", "é", "é"),
    ("date", np.datetime64("2024-01-01"), "2024-01-01"),
    ("date", "0000-12-31", "0000-12-31"),
    ("date", "10183-09-21", "10183-09-21"),  # beyond the years Arrow parses: still the partition's own text
    ("date", "-0221-09-04", "-0221-09-04"),
    ("timestamp", dt.date(2024, 1, 1), "2024-01-01 00:00:00.000000"),
    ("timestamp", "2024-01-01", "2024-01-01 00:00:00.000000"),
    ("timestamp", np.datetime64("2024-01-01T01:02:03.000004"), "2024-01-01 01:02:03.000004"),
    ("timestamp", dt.datetime(2024, 1, 1, 2, tzinfo=PLUS2), "2024-01-01 00:00:00.000000"),  # its UTC time
    ("timestamp", "10183-09-21 23:59:59.999999", "10183-09-21 23:59:59.999999"),
    ("timestamp_tz", dt.datetime(2024, 1, 1), "2024-01-01 00:00:00.000000Z"),  # naive: UTC
    ("timestamp_tz", dt.date(2024, 1, 1), "2024-01-01 00:00:00.000000Z"),
    ("timestamp_tz", "2024-01-01 02:00:00+02:00", "2024-01-01 00:00:00.000000Z"),
    ("timestamp_tz", "-0221-09-04 00:00:00.000000Z", "-0221-09-04 00:00:00.000000Z"),
])
def test_a_value_becomes_the_text_a_row_holding_it_is_written_with(type_name: str, value: Any, text: str) -> None:
    assert partition_text("p", type_name, value, table="t") == text


@pytest.mark.parametrize("type_name", ["date", "timestamp", "timestamp_tz"])
def test_the_text_of_every_date_and_timestamp_names_its_own_partition(type_name: str) -> None:
    days = [-3_000_000, -800_000, -719_529, -719_528, -719_163, -719_162, -1, 0, 19_723, 2_932_896, 2_932_897,
            3_000_000]
    typ = TYPES[type_name]
    if type_name == "date":
        values = pa.array(days, pa.int32()).cast(typ)
    else:
        values = pa.array([d * 86_400_000_000 + 45_296_000_007 for d in days], pa.int64()).cast(typ)
    for text in partition_values(pa.table({"p": values}), ["p"])[0].to_pylist():
        assert partition_text("p", type_name, text, table="t") == text


# -- a partition's text read back ---------------------------------------------------------------------------------


def test_the_text_of_each_format_vector_reads_back_as_its_value() -> None:
    _, rows = doc_table("partition-text-vectors")
    read = 0
    for typ, value, text, _ in rows:
        if re.fullmatch(r"refused: `(\w+)`", text):
            continue
        expected = arrow_array(typ, [parse_value(typ, value)])
        got = partition_value("p", typ, json.loads(text), table="t")
        assert got.type == TYPES[typ] and got.equals(expected), f"{typ} {text}: {got} != {expected}"
        assert partition_values(pa.table({"p": got}), ["p"])[0].to_pylist() == [json.loads(text)]
        read += 1
    assert read >= 20


@pytest.mark.parametrize("type_name", ["date", "timestamp", "timestamp_tz"])
def test_every_date_and_timestamp_the_writer_writes_reads_back_exactly(type_name: str) -> None:
    days = [-3_000_000, -800_000, -719_529, -719_528, -719_163, -719_162, -1, 0, 19_723, 2_932_896, 2_932_897,
            3_000_000]
    if type_name == "date":
        values = pa.array(days, pa.int32()).cast(TYPES[type_name])
    else:
        values = pa.array([d * 86_400_000_000 + 45_296_000_007 for d in days], pa.int64()).cast(TYPES[type_name])
    texts = partition_values(pa.table({"p": values}), ["p"])[0].to_pylist()
    assert "-0221-09-04" in texts[1] and texts[-1].startswith("10183-09-21")
    got = pa.concat_arrays([partition_value("p", type_name, t, table="t") for t in texts])
    assert got.equals(values)


def test_a_null_partition_reads_back_as_a_null_of_the_type() -> None:
    assert partition_value("p", "date", None, table="t").equals(pa.nulls(1, pa.date32()))


@pytest.mark.parametrize(("type_name", "text"), [
    ("bool", "yes"),
    ("int8", "300"),
    ("int64", "x"),
    ("date", "2024-13-01"),
    ("date", "10183-02-30"),
    ("date", "2024-01-01 00:00:00.000000"),
    ("timestamp", "10183-09-21 24:00:00.000000"),
    ("timestamp", "-0221-09-04 00:00:00.000000Z"),
    ("timestamp_tz", "2024-01-01 00:00:00.000000"),  # no zone: which instant is meant cannot be told
])
def test_text_that_is_no_value_of_the_type_is_refused_naming_it(type_name: str, text: str) -> None:
    with pytest.raises(InvalidInputError) as err:
        partition_value("p", type_name, text, table="t")
    message = str(err.value)
    assert message.startswith("table t:") and "column 'p'" in message and f"({type_name})" in message
    assert repr(text) in message


@pytest.mark.parametrize(("type_name", "value"), [
    ("bool", 1),
    ("bool", "yes"),
    ("int8", True),
    ("int8", 300),
    ("int8", "x"),
    ("int16", 1.5),
    ("int64", 2**63),
    ("string", 5),
    ("string", dt.date(2024, 1, 1)),
    ("string", b"x"),
    ("binary", 5),
    ("binary", b"\xff"),  # not UTF-8: no partition is named by it
    ("date", dt.datetime(2024, 1, 1, 5)),
    ("date", 20240101),
    ("date", "2024-13-01"),
    ("date", "10183-02-30"),
    ("timestamp", "yesterday"),
    ("timestamp", 1_700_000_000),
    ("timestamp", np.datetime64("2024-01-01T00:00:00.000000001")),  # finer than the column's microseconds
    ("timestamp", "10183-09-21 24:00:00.000000"),
    ("timestamp_tz", "2024-01-01 00:00:00.000000"),  # no zone: which instant is meant cannot be told
    ("timestamp_tz", np.datetime64("NaT")),
    ("int32", None),
])
def test_a_value_that_cannot_be_one_of_the_column_is_refused_naming_it(tmp_path: Path, type_name: str,
                                                                       value: Any) -> None:
    mine, _, _ = PARTITIONS[type_name]
    table = _table(tmp_path, type_name)
    table.upsert(pa.table({"id": [1], "p": pa.array([mine], TYPES[type_name]), "v": ["a"]}))
    files, version = data_files_on_disk(tmp_path / "t"), table.version
    with pytest.raises(InvalidInputError) as err:
        table.overwrite(pa.table({"id": [7], "p": pa.array([mine], TYPES[type_name]), "v": ["new"]}),
                        partition={"p": value})
    message = str(err.value)
    assert "partition column 'p'" in message and f"({type_name})" in message
    assert repr(value) in message and f"({type(value).__name__})" in message
    assert Table.open(table.uri).version == version and data_files_on_disk(tmp_path / "t") == files


def test_an_overwrite_still_refuses_rows_of_another_partition(tmp_path: Path) -> None:
    table = _table(tmp_path, "bool")
    with pytest.raises(InvalidInputError, match=r"1 row\(s\) have p != 'true'"):
        table.overwrite(pa.table({"id": [1, 2], "p": [True, False], "v": ["a", "b"]}), partition={"p": True})
    assert table.version == 0


def test_a_purge_filter_takes_values_as_an_overwrite_does(tmp_path: Path) -> None:
    where = PartitionFilter.of(("ds", "flag"), [{"ds": dt.date(2024, 1, 1), "flag": True}, {"ds": None}],
                               table="t", types={"ds": "date", "flag": "bool"})
    assert where.specs == ({"ds": "2024-01-01", "flag": "true"}, {"ds": None})
    with pytest.raises(InvalidInputError, match=r"'soon' \(str\) is not a value of partition column 'ds' \(date\)"):
        PartitionFilter.of(("ds",), [{"ds": "soon"}], table="t", types={"ds": "date"})
    table = Table.create(str(tmp_path / "t"), "id:int64!,ds:date!", primary_key="id", partition_by="ds")
    table.upsert(pa.table({"id": [1, 2], "ds": [dt.date(2024, 1, 1), dt.date(2024, 1, 2)]}))
    assert plan_purge(table, partitions=[{"ds": dt.date(2024, 1, 1)}]).partitions == ({"ds": "2024-01-01"},)


# -- keys outside the years 1 to 9999 ---------------------------------------------------------------------------

KEY_BOUNDS = {
    "date": (pa.array([-719_162, 2_932_896], pa.int32()), [-719_163, 2_932_897, -800_000]),
    "timestamp": (pa.array([-62_135_596_800_000_000, 253_402_300_799_999_999], pa.int64()),
                  [-62_135_596_800_000_001, 253_402_300_800_000_000]),
    "timestamp_tz": (pa.array([-62_135_596_800_000_000, 253_402_300_799_999_999], pa.int64()),
                     [-62_135_596_800_000_001, 253_402_300_800_000_000]),
}
SHOWN = {
    ("date", -719_163): "'0000-12-31'", ("date", 2_932_897): "'10000-01-01'", ("date", -800_000): "'-0221-09-04'",
    ("timestamp", -62_135_596_800_000_001): "'0000-12-31 23:59:59.999999'",
    ("timestamp", 253_402_300_800_000_000): "'10000-01-01 00:00:00.000000'",
    ("timestamp_tz", -62_135_596_800_000_001): "'0000-12-31 23:59:59.999999Z'",
    ("timestamp_tz", 253_402_300_800_000_000): "'10000-01-01 00:00:00.000000Z'",
}


@pytest.mark.parametrize("type_name", sorted(KEY_BOUNDS))
def test_keys_in_the_years_1_and_9999_are_written_and_recorded(tmp_path: Path, type_name: str) -> None:
    bounds, _ = KEY_BOUNDS[type_name]
    table = Table.create(str(tmp_path / "t"), f"k:{type_name}!,v:string", primary_key="k", buckets=1)
    keys = bounds.cast(TYPES[type_name])
    table.upsert(pa.table({"k": keys, "v": ["first", "last"]}))
    assert sorted(r["k"] for r in table.read().to_pylist()) == keys.to_pylist()
    (info,) = table.snapshot().files.values()
    assert info.key_min is not None and info.key_max is not None
    assert str(info.key_min[0]).startswith("0001-01-01") and str(info.key_max[0]).startswith("9999-12-31")


@pytest.mark.parametrize("type_name", sorted(KEY_BOUNDS))
@pytest.mark.parametrize("write", ["upsert", "delete", "overwrite", "write_changes"])
def test_a_key_outside_the_years_1_to_9999_is_refused_before_any_file_is_written(
        tmp_path: Path, type_name: str, write: str) -> None:
    bounds, outside = KEY_BOUNDS[type_name]
    table = Table.create(str(tmp_path / "t"), f"k:{type_name}!,v:string", primary_key="k", buckets=4)
    table.upsert(pa.table({"k": bounds.cast(TYPES[type_name]), "v": ["first", "last"]}))
    files, version = data_files_on_disk(tmp_path / "t"), table.version
    for number in outside:
        numbers = pa.array([0, number, 1], bounds.type)
        batch = pa.table({"k": numbers.cast(TYPES[type_name]), "v": ["a", "b", "c"]})
        with pytest.raises(InvalidInputError) as err:
            if write == "write_changes":
                table.write_changes(batch.append_column("op", pa.array([0, 0, 1], pa.int8())), "op")
            else:
                getattr(table, write)(batch)
        message = str(err.value)
        assert "key column 'k'" in message and SHOWN[(type_name, number)] in message, message
        assert "years 1 to 9999" in message and "nothing was written" in message
        assert Table.open(table.uri).version == version and data_files_on_disk(tmp_path / "t") == files


def test_a_partition_column_outside_the_key_has_no_such_bound(tmp_path: Path) -> None:
    table = Table.create(str(tmp_path / "t"), "id:int64!,ds:date!", primary_key="id", partition_by="ds")
    far = pa.array([3_000_000], pa.int32()).cast(pa.date32())
    table.upsert(pa.table({"id": [1], "ds": far}))
    table.overwrite(pa.table({"id": [2], "ds": far}), partition={"ds": "10183-09-21"})
    assert table.read().column("id").to_pylist() == [2]
