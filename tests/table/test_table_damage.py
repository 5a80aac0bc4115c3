"""A damaged table on storage: data files missing or not the table's, checkpoints that fail their check.

A damaged data file is a :class:`~maintd.DataFileError` naming the file and what to do (never a raw
``FileNotFoundError`` or ``ArrowInvalid``), and nothing is deleted because of it; a damaged checkpoint costs
read time only, as long as an older checkpoint or the commits can stand in for it.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.acero  # imported before freezegun swaps datetime.date, which its C module checks on import
import pyarrow.parquet as pq
import pytest
from freezegun import freeze_time
from loguru import logger

from maintd import CorruptLogError, DataFileMissingError, DataFileSchemaError, Table
from maintd.reclaim import reclaim_table
from maintd.table.log.tablelog import LAST_CHECKPOINT, checkpoint_path, commit_path

from .table_helpers import data_files_on_disk

T0 = datetime(2024, 3, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def table(tmp_path: Path) -> Table:
    """Six upserts a day ago, a checkpoint every two versions."""
    with freeze_time(T0):
        t = Table.create(str(tmp_path / "t"), "id:int64!,name:string", primary_key="id", buckets=2,
                         properties={"log.checkpoint.interval": 2, "acid.data.retain.hours": 1})
        for i in range(6):
            t.upsert(pa.table({"id": [i, 100 + i], "name": [f"n{i}", "x"]}))
    return t


@pytest.fixture
def warnings() -> Iterator[list[str]]:
    seen: list[str] = []
    sink = logger.add(lambda m: seen.append(str(m)), level="WARNING")
    yield seen
    logger.remove(sink)


def _victim(table: Table) -> Path:
    return Path(table.uri) / sorted(table.snapshot().files)[0]


def test_a_missing_data_file_is_named_with_what_to_do(table: Table) -> None:
    victim = _victim(table)
    victim.unlink()
    with pytest.raises(DataFileMissingError, match="is missing from storage, but the log references it") as caught:
        Table.open(table.uri).read()
    rel = victim.relative_to(table.uri).as_posix()
    assert caught.value.path == rel and rel in str(caught.value) and "Restore" in str(caught.value)


@pytest.mark.parametrize(("what", "replacement", "message"), [
    ("another column type", pa.table({"id": ["one"], "name": ["a"], "_maintd_op": pa.array([0], pa.int8())}),
     "column 'id' is of type string, expected int64"),
    ("a missing column", pa.table({"id": pa.array([1], pa.int64()), "_maintd_op": pa.array([0], pa.int8())}),
     "column 'name' is missing"),
    ("not Parquet", None, "is not a readable Parquet file"),
])
def test_a_data_file_that_is_not_the_tables_is_named(table: Table, what: str, replacement: pa.Table | None,
                                                     message: str) -> None:
    victim = _victim(table)
    if replacement is None:
        victim.write_bytes(b"this is not parquet at all")
    else:
        pq.write_table(replacement, victim)
    with pytest.raises(DataFileSchemaError, match=message) as caught:
        Table.open(table.uri).read()
    assert caught.value.path == victim.relative_to(table.uri).as_posix()


def test_reclamation_refuses_a_table_whose_live_files_are_missing_and_deletes_nothing(table: Table) -> None:
    victim = _victim(table)
    victim.unlink()
    root = Path(table.uri)
    orphan = root / "bucket-00000" / f"delta-L0-{'a' * 32}.parquet"
    orphan.write_bytes(b"PAR1 an old orphan")
    before, log = data_files_on_disk(root), sorted((root / "_log").iterdir())

    with pytest.raises(DataFileMissingError, match=r"live data file.*missing from storage.*nothing was deleted"):
        reclaim_table(Table.open(table.uri), now=T0 + timedelta(days=9), orphan_grace=timedelta(hours=1))

    assert data_files_on_disk(root) == before and sorted((root / "_log").iterdir()) == log


# -- checkpoints ------------------------------------------------------------------------------------------------------


def _expected(table: Table) -> list[dict[str, object]]:
    return sorted(table.read().to_pylist(), key=lambda r: r["id"])  # type: ignore[arg-type,return-value]


def test_a_corrupt_newest_checkpoint_falls_back_to_an_older_one_and_is_reported(table: Table,
                                                                              warnings: list[str]) -> None:
    expected = _expected(table)
    newest = Table.open(table.uri).log.last_checkpoint_hint()
    assert newest == 6
    path = Path(table.uri) / checkpoint_path(6)
    path.write_bytes(path.read_bytes()[:-30])

    assert _expected(Table.open(table.uri)) == expected
    assert any("checkpoint" in w and checkpoint_path(6) in w and "older checkpoint" in w for w in warnings)


@pytest.mark.parametrize("damage", ["truncated", "zeroed", "a row changed"])
def test_any_damaged_checkpoint_is_replaced_by_the_commits_when_no_other_checkpoint_is_left(
        table: Table, damage: str, warnings: list[str]) -> None:
    expected = _expected(table)
    root = Path(table.uri)
    for v in (2, 4):
        (root / checkpoint_path(v)).unlink()
    path = root / checkpoint_path(6)
    if damage == "truncated":
        path.write_bytes(path.read_bytes()[: len(path.read_bytes()) // 2])
    elif damage == "zeroed":
        path.write_bytes(bytes(len(path.read_bytes())))
    else:  # a valid Parquet file whose rows differ from what its checksum says
        t = pq.read_table(path)
        rows = t.column("action").to_pylist()
        pq.write_table(pa.table({"action": rows[:-1]}, metadata=t.schema.metadata), path)

    assert _expected(Table.open(table.uri)) == expected
    assert any(checkpoint_path(6) in w for w in warnings)


def test_a_corrupt_checkpoint_that_nothing_can_replace_is_named(table: Table) -> None:
    root = Path(table.uri)
    for v in range(6):
        (root / commit_path(v)).unlink(missing_ok=True)
    for v in (2, 4):
        (root / checkpoint_path(v)).unlink()
    (root / checkpoint_path(6)).write_bytes(b"garbage")
    (root / LAST_CHECKPOINT).unlink()
    with pytest.raises(CorruptLogError, match=r"checkpoint .*\(version 6\) cannot be read") as caught:
        Table.open(table.uri).read()
    assert caught.value.version == 6 and caught.value.path == checkpoint_path(6)
