"""Tables of protocol 1 (written before commit files carried a header) stay readable and writable.

``fixtures/v1_table`` was written by maintd at protocol 1: creates, upserts with an application id, a delete,
a partition overwrite, a property change, a compaction and checkpoints every 3 versions (without transaction
records); ``fixtures/v1_table_reads.json`` holds what every version read then.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.acero  # imported before freezegun swaps datetime.date, which its C module checks on import
import pyarrow.parquet as pq
import pytest
from freezegun import freeze_time

from maintd import Table
from maintd.reclaim import reclaim_table
from maintd.table.log.actions import Protocol, action_from_dict
from maintd.table.log.tablelog import checkpoint_path, commit_path

FIXTURES = Path(__file__).with_name("fixtures")
NAMED = Protocol(min_reader_version=7, min_writer_version=7, reader_features=(), writer_features=())
"""Named table features, none: what a protocol-1 table is upgraded to."""


@pytest.fixture
def v1(tmp_path: Path) -> Iterator[Table]:
    """The fixture table, with the clock an hour after its last commit (its history is then all retained)."""
    shutil.copytree(FIXTURES / "v1_table", tmp_path / "t")
    last = json.loads((tmp_path / "t" / commit_path(9)).read_text().splitlines()[0])["commit_info"]["timestamp"]
    with freeze_time(datetime.fromtimestamp(last / 1000, UTC) + timedelta(hours=1)):
        yield Table.open(str(tmp_path / "t"))


def _reads() -> dict[int, list[dict[str, Any]]]:
    return {int(v): rows for v, rows in json.loads((FIXTURES / "v1_table_reads.json").read_text()).items()}


def _rows(table: Table, version: int | None = None) -> list[dict[str, Any]]:
    return sorted(table.read(version=version).to_pylist(), key=lambda r: (r["ds"], r["id"]))


def _plain_lines(path: Path) -> list[Any]:
    """Parse a commit file line by line, as a protocol-1 reader does (no header line allowed)."""
    return [action_from_dict(json.loads(line)) for line in path.read_text().splitlines() if line.strip()]


def test_every_version_of_a_protocol_1_table_reads_as_it_did(v1: Table) -> None:
    assert v1.snapshot().protocol == Protocol(min_reader_version=1, min_writer_version=1)
    for version, rows in _reads().items():
        assert _rows(v1, version) == rows, f"version {version}"


def test_writing_a_protocol_1_table_keeps_it_readable_by_protocol_1_readers(v1: Table) -> None:
    latest = v1.version
    for i in range(4):
        v1.upsert(pa.table({"id": [50 + i], "name": ["new"], "ds": ["y"]}))
    root = Path(v1.uri)
    for v in range(latest + 1, latest + 5):
        assert _plain_lines(root / commit_path(v)), f"commit {v} is in the format of protocol 1 (no header)"
    assert Table.open(v1.uri).snapshot().protocol.min_writer_version == 1
    checkpoint = pq.read_table(root / checkpoint_path(12))
    assert all(action_from_dict(json.loads(line)) for line in checkpoint.column("action").to_pylist())
    assert b"txns" in (checkpoint.schema.metadata or {}), "checkpoints record transactions at any protocol"
    assert {r["id"] for r in _rows(Table.open(v1.uri))} >= {50, 51, 52, 53}


def test_a_protocol_1_table_is_reclaimed_and_its_writers_still_land(v1: Table) -> None:
    expected = _rows(v1)
    report = reclaim_table(v1, orphan_grace=timedelta(hours=1))
    assert report.oldest_retained_version == 0, "168 hours of retention: nothing expired yet"
    v1.set_properties({"acid.data.retain.hours": 0})
    report = reclaim_table(Table.open(v1.uri), orphan_grace=timedelta(hours=1))
    assert report.versions_expired > 0
    version = Table.open(v1.uri).upsert(pa.table({"id": [60], "name": ["after"], "ds": ["x"]}))
    assert Table.open(v1.uri).log.txn_in_history(version) is not None
    assert _rows(Table.open(v1.uri)) == sorted([*expected, {"id": 60, "name": "after", "ds": "x"}],
                                                 key=lambda r: (r["ds"], r["id"]))


def test_upgrading_the_protocol_makes_later_commits_self_verifying(v1: Table) -> None:
    """A protocol-1 table implies no feature: it moves to named features with none, its commit files (of format
    7) self-verifying from then on."""
    before = _reads()
    version = v1.upgrade_protocol()
    assert Table.open(v1.uri).snapshot().protocol == NAMED
    assert v1.upgrade_protocol() == version, "a second upgrade is a no-op"
    after = v1.upsert(pa.table({"id": [70], "name": ["v2"], "ds": ["x"]}))
    first = (Path(v1.uri) / commit_path(after)).read_text().splitlines()[0]
    assert json.loads(first)["header"]["version"] == after and json.loads(first)["header"]["format"] == 7
    reopened = Table.open(v1.uri)
    for v, rows in before.items():
        assert _rows(reopened, v) == rows


def test_the_cli_upgrades_the_protocol_only_when_confirmed(v1: Table, monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from maintd.cli import app

    runner = CliRunner()
    latest = v1.version
    refused = runner.invoke(app, ["table", "upgrade-protocol", v1.uri])  # not a terminal, no --yes
    assert refused.exit_code == 2 and "pass --yes" in refused.output, refused.output
    monkeypatch.setattr("maintd.cli._output.stdin_is_terminal", lambda: True)
    declined = runner.invoke(app, ["table", "upgrade-protocol", v1.uri], input="n\n")
    assert declined.exit_code == 1 and "upgrade cancelled; nothing changed" in declined.output
    assert Table.open(v1.uri).version == latest
    assert Table.open(v1.uri).snapshot().protocol == Protocol(min_reader_version=1, min_writer_version=1)

    done = runner.invoke(app, ["table", "upgrade-protocol", v1.uri, "--yes"])
    assert done.exit_code == 0, done.output
    assert "from protocol reader 1, writer 1 to reader 7, writer 7 (named features: none)" in done.output
    assert f"at version {latest + 1}" in done.output
    assert Table.open(v1.uri).snapshot().protocol == NAMED
    assert Table.open(v1.uri).history(limit=1)[0].operation == "UPGRADE PROTOCOL"
    again = runner.invoke(app, ["table", "upgrade-protocol", v1.uri, "--yes"])
    assert again.exit_code == 0 and "already; nothing changed" in again.output
    assert Table.open(v1.uri).version == latest + 1
    for v, rows in _reads().items():
        assert _rows(Table.open(v1.uri), v) == rows


def test_the_cli_names_a_missing_table_when_asked_to_upgrade_it(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from maintd.cli import app

    result = CliRunner().invoke(app, ["table", "upgrade-protocol", str(tmp_path / "nope"), "--yes"])
    assert result.exit_code == 2 and "no table at" in result.output, result.output
