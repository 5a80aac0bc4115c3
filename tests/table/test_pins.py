"""Pins through the Table API: what a bad pin or unpin is told (what reclamation and PURGE do with pins is in
tests/reclaim/test_reclaim_pins.py; pins in the format and the pin conflict table are in test_pins_format.py and
test_pins_conflicts.py)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pytest

from maintd import InvalidInputError, Table, VersionNotFoundError


def overwritten_table(root: Path, retain_hours: int = 24) -> Table:
    """Versions 1-2 upsert, 3 overwrites the table (removing the files of 1 and 2), 4 upserts."""
    table = Table.create(str(root), "id:int64!,name:string", primary_key="id", buckets=2,
                         properties={"acid.data.retain.hours": retain_hours})
    for v, batch in enumerate([{"id": [1, 2], "name": ["a", "b"]}, {"id": [3], "name": ["c"]}], 1):
        assert table.upsert(pa.table(batch)) == v
    assert table.overwrite(pa.table({"id": [9], "name": ["z"]})) == 3
    assert table.upsert(pa.table({"id": [10], "name": ["y"]})) == 4
    return table


def test_bad_pins_get_one_clear_error(tmp_path: Path) -> None:
    table = overwritten_table(tmp_path / "t", retain_hours=0)
    with pytest.raises(VersionNotFoundError, match="has no version 9; the latest is 4: pin an existing version"):
        table.pin(9, timedelta(hours=1))
    with pytest.raises(VersionNotFoundError, match=r"version 1 has expired .* pin version 4 or newer"):
        table.pin(1, timedelta(hours=1))
    with pytest.raises(InvalidInputError, match=r"TTL -1 day.* is not positive"):
        table.pin(4, timedelta(hours=-1))
    with pytest.raises(InvalidInputError, match=r"must be a datetime\.timedelta"):
        table.pin(4, 3)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="has no pin 'nope'"):
        table.unpin("nope")
    assert table.version == 4 and table.snapshot().protocol.min_reader_version == 2, "nothing was committed"
