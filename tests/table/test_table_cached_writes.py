"""A writer that committed a moment ago writes its next batch on the state it committed, without looking the
table up: a commit lands on it exactly as on a state just looked up, or its first attempt loses and the retry
finds the latest state. What a lookup would have changed still happens: a metadata change since is written
on (the batch prepared again on the latest state), an application version is always checked afresh."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from maintd import Table
from maintd.table import table as table_module
from maintd.table.log.tablelog import TableLog

SCHEMA = "id:int64!,name:string"


def rows(*ids: int, name: str = "x") -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "name": [name] * len(ids)})


def counting_lookups(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    real = TableLog.latest_version

    def latest_version(self: TableLog, hint: int | None = None) -> int:
        found = real(self, hint)
        calls.append(found)
        return found

    monkeypatch.setattr(TableLog, "latest_version", latest_version)
    return calls


def data_files_on_disk(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*.parquet") if "_log" not in p.parts}


def test_a_writer_commits_its_next_batch_without_looking_the_table_up(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    table = Table.create(str(tmp_path / "t"), SCHEMA, primary_key="id", buckets=1)
    assert table.upsert(rows(1)) == 1
    lookups = counting_lookups(monkeypatch)
    assert table.upsert(rows(2)) == 2 and table.upsert(rows(3)) == 3
    assert lookups == []
    assert sorted(Table.open(table.uri).read().column("id").to_pylist()) == [1, 2, 3]


def test_a_writer_behind_another_lands_after_it(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    mine = Table.create(uri, SCHEMA, primary_key="id", buckets=1)
    other = Table.open(uri)
    mine.upsert(rows(1))
    other.upsert(rows(2, name="other"))
    assert mine.upsert(rows(3)) == 3, "the first attempt (at 2) lost; the retry landed after the other commit"
    read = Table.open(uri).read()
    assert sorted(read.column("id").to_pylist()) == [1, 2, 3]
    assert data_files_on_disk(tmp_path / "t") == {f.path for f in Table.open(uri).snapshot().files.values()}


def test_a_metadata_change_since_the_writers_state_is_written_on(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A lookup before the write would have seen the new properties and the write would have landed: so it
    must, instead of failing as a conflict with the property change; the files of the lost attempt go."""
    uri = str(tmp_path / "t")
    mine = Table.create(uri, SCHEMA, primary_key="id", buckets=1)
    mine.upsert(rows(1))
    Table.open(uri).set_properties({"maintd.owner": "someone"})
    lookups = counting_lookups(monkeypatch)
    assert mine.upsert(rows(2)) == 3
    assert lookups, "prepared again on the latest state"
    latest = Table.open(uri).snapshot()
    assert latest.metadata.properties["maintd.owner"] == "someone"
    assert sorted(Table.open(uri).read().column("id").to_pylist()) == [1, 2]
    assert data_files_on_disk(tmp_path / "t") == {f.path for f in latest.files.values()}


def test_an_application_version_is_checked_on_the_latest_state(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    mine = Table.create(uri, SCHEMA, primary_key="id", buckets=1)
    mine.upsert(rows(1), app_id="loader", app_version=1)
    other = Table.open(uri)
    assert other.upsert(rows(2), app_id="loader", app_version=2) == 2
    assert mine.upsert(rows(3), app_id="loader", app_version=2) == 2, "version 2 of the loader is in: skipped"
    assert sorted(Table.open(uri).read().column("id").to_pylist()) == [1, 2]


def test_a_state_older_than_the_window_is_looked_up_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    table = Table.create(str(tmp_path / "t"), SCHEMA, primary_key="id", buckets=1)
    table.upsert(rows(1))
    monkeypatch.setattr(table_module, "FRESH_BASE_SECONDS", 0.0)
    lookups = counting_lookups(monkeypatch)
    assert table.upsert(rows(2)) == 2
    assert lookups


def test_a_batch_that_does_not_fit_is_refused_as_before(tmp_path: Path) -> None:
    table = Table.create(str(tmp_path / "t"), SCHEMA, primary_key="id", buckets=1)
    table.upsert(rows(1))
    bad: Any = pa.table({"name": ["no key"]})
    with pytest.raises(Exception, match="key column"):
        table.upsert(bad)
    assert table.version == 1
