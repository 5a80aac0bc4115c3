"""Partition pruning: a partition is skipped only when its values, read from their text, fail the filter."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from maintd import Table
from maintd.table.files.filters import parse_filter
from maintd.table.files.pruning import partition_may_match


@pytest.mark.parametrize(("text", "matches"), [
    ("2020-01-01", True), ("2020-01-02", False),
    ("0500-01-01", False),  # a year written with leading zeros
    ("12000-01-01", True),  # a year no Python date holds: cannot be compared, so the partition is kept
    (None, False),
])
def test_a_date_partition_is_pruned_by_the_value_its_text_names(tmp_path: Path, text: str | None,
                                                                 matches: bool) -> None:
    md = Table.create(str(tmp_path / "t"), "id:int64!,ds:date!", primary_key="id",
                      partition_by="ds").snapshot().metadata
    row_filter = parse_filter([("ds", "=", dt.date(2020, 1, 1))], md, where="test")
    assert partition_may_match({"ds": text}, row_filter, md) is matches


@pytest.mark.parametrize(("type_name", "tz", "suffix"), [("timestamp", None, ""), ("timestamp_tz", dt.UTC, "Z")])
def test_a_timestamp_partition_in_the_writers_text_form_is_pruned(tmp_path: Path, type_name: str,
                                                                  tz: dt.tzinfo | None, suffix: str) -> None:
    md = Table.create(str(tmp_path / "t"), f"id:int64!,at:{type_name}!", primary_key="id",
                      partition_by="at").snapshot().metadata
    row_filter = parse_filter([("at", ">=", dt.datetime(2024, 5, 1, 12, tzinfo=tz))], md, where="test")
    assert partition_may_match({"at": f"2024-05-01 12:00:00.000000{suffix}"}, row_filter, md)
    assert not partition_may_match({"at": f"2024-05-01 11:59:59.999999{suffix}"}, row_filter, md)
