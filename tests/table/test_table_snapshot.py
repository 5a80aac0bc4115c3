"""Snapshots: the names of partitions, their directories, and what a replay keeps."""

from __future__ import annotations

from maintd.table.snapshot import format_partition, partition_path


def test_a_partition_is_shown_as_its_comma_joined_columns_and_no_partition_as_unpartitioned() -> None:
    assert format_partition((("ds", "2026-01-05"), ("region", None))) == "ds=2026-01-05,region=None"
    assert format_partition(()) == "(unpartitioned)"


def test_a_partition_directory_quotes_every_value_and_names_null_values() -> None:
    assert partition_path({"ds": None, "region": "eu west/1"}, ["ds", "region"]) == "ds=__NULL__/region=eu%20west%2F1"
    assert partition_path({}, []) == ""
