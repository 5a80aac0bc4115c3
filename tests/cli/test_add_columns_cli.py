"""``maintd table add-columns``: adds nullable columns (text and ``--json``), and refuses everything else with
exit code 2 and a message naming the column and what to do."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from maintd import Table
from maintd.cli import app

runner = CliRunner()


def _table(tmp_path: Path) -> str:
    uri = str(tmp_path / "t")
    Table.create(uri, "id:int64!,region:string!,name:string", primary_key=["region", "id"], partition_by="region")
    return uri


def test_add_columns_adds_nullable_columns(tmp_path: Path) -> None:
    uri = _table(tmp_path)
    done = runner.invoke(app, ["table", "add-columns", uri, "score:double,seen:date"])
    assert done.exit_code == 0, done.output
    assert "added columns at version 1" in done.output and "score:float64, seen:date" in done.output
    shown = runner.invoke(app, ["table", "add-columns", uri, "note:str", "--json"])
    assert shown.exit_code == 0, shown.output
    doc = json.loads(shown.output)
    assert doc["version"] == 2 and [c["name"] for c in doc["schema"] if c["added"]] == ["score", "seen", "note"]
    assert all(c["nullable"] for c in doc["schema"] if c["added"])
    assert Table.open(uri).snapshot().protocol.min_reader_version == 6


@pytest.mark.parametrize(("spec", "message"), [
    ("name:string", "column 'name' exists already"),
    ("score:int64!", "cannot be added NOT NULL"),
    ("score:decimal", "unknown column type 'decimal'"),
    ("id:int64", "is a key or partition column"),
    ("region:string", "is a key or partition column"),
    ("score", "must be name:type"),
])
def test_add_columns_refuses_what_it_cannot_do_with_exit_code_2(tmp_path: Path, spec: str, message: str) -> None:
    uri = _table(tmp_path)
    result = runner.invoke(app, ["table", "add-columns", uri, spec])
    assert result.exit_code == 2, result.output
    assert message in " ".join(result.output.split())
    assert Table.open(uri).version == 0


def test_add_columns_on_no_table_exits_2(tmp_path: Path) -> None:
    result = runner.invoke(app, ["table", "add-columns", str(tmp_path / "none"), "a:int32"])
    assert result.exit_code == 2 and "no table" in result.output
