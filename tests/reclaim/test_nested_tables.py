"""Tables inside tables: refused at create, and orphan cleanup never descends into a directory holding a ``_log/``.

A table created inside another table's directory lost its data files to the outer table's orphan cleanup: they
are maintd's names that the outer log does not reference.
"""

from __future__ import annotations

import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from stores import TableStore

from maintd import Table
from maintd.errors import InvalidInputError
from maintd.reclaim import reclaim_table
from maintd.storage import storage_for_uri
from maintd.storage.discovery import enclosing_table, parent_uris

SCHEMA = "id:int64!,v:string"


def filled(uri: str, n: int = 3) -> Table:
    table = Table.create(uri, SCHEMA, primary_key="id", buckets=2)
    for i in range(n):
        table.upsert(pa.Table.from_pylist([{"id": i, "v": uri}]))
    return table


@pytest.fixture
def root(table_store: TableStore) -> str:
    """A fresh root for tables, on each store in turn (``table_store``, tests/conftest.py)."""
    return table_store.root


def test_a_table_inside_another_is_refused_at_create_naming_the_outer_one(root: str) -> None:
    filled(f"{root}/outer", 1)
    for inner in (f"{root}/outer/sub", f"{root}/outer/ds=a/bucket-00000/t", f"{root}/outer/_log/t"):
        with pytest.raises(InvalidInputError, match=rf"inside the table at {root}/outer\b.*outside it"):
            Table.create(inner, SCHEMA, primary_key="id")
    filled(f"{root}/outer2", 1)  # beside it: fine


def test_a_table_around_another_is_refused_at_create_naming_the_inner_one(root: str) -> None:
    filled(f"{root}/wh/db/inner", 1)
    with pytest.raises(InvalidInputError, match=rf"holds the table at {root}/wh/db/inner"):
        Table.create(f"{root}/wh", SCHEMA, primary_key="id")


def test_the_locations_enclosing_a_uri_reach_the_bucket_or_the_filesystem_root() -> None:
    assert parent_uris("s3://b/w/db/t") == ["s3://b/w/db", "s3://b/w", "s3://b"]
    assert parent_uris("abfss://c@acct.dfs.core.windows.net/w/t") == ["abfss://c@acct.dfs.core.windows.net/w",
                                                                      "abfss://c@acct.dfs.core.windows.net"]
    assert parent_uris("/a/b") == ["/a", "/"]


def test_orphan_cleanup_never_descends_into_a_table_inside_the_table(tmp_path: Path, s3_root: Any) -> None:
    """A table that got inside another anyway (copied there, or created by an older maintd) keeps its files."""
    outer = filled(str(tmp_path / "outer"))
    inner_src = filled(str(tmp_path / "elsewhere" / "inner"))
    before = inner_src.read()
    shutil.copytree(tmp_path / "elsewhere" / "inner", tmp_path / "outer" / "sub" / "inner")
    assert enclosing_table(storage_for_uri(str(tmp_path / "outer" / "sub" / "inner"))) == str(tmp_path / "outer")
    report = reclaim_table(outer, orphan_grace=timedelta(0), force_short_grace=True,
                           now=datetime.now(UTC) + timedelta(days=30))
    assert report.orphan_files_deleted == 0 and report.nested_tables == ("sub/inner",)
    assert Table.open(str(tmp_path / "outer" / "sub" / "inner")).read().equals(before)
    assert outer.read().num_rows == 3
