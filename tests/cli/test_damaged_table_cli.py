"""The command line on damaged tables: one line naming the file and what to do, exit code 2, no traceback;
``maintd gc`` names the damaged table, deletes nothing in it and reclaims the others."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from maintd import Table
from maintd.table.log.actions import CommitInfo, Protocol
from maintd.table.log.commitfile import encode_commit
from maintd.table.log.tablelog import commit_path


def maintd(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "maintd", *args], capture_output=True, text=True, timeout=120)


def _table(root: Path) -> Table:
    table = Table.create(str(root), "id:int64!,name:string", primary_key="id", buckets=1)
    table.upsert(pa.table({"id": [1, 2], "name": ["a", "b"]}))
    table.upsert(pa.table({"id": [3], "name": ["c"]}))
    return table


def _truncate(t: Table) -> str:
    path = Path(t.uri) / commit_path(2)
    data = path.read_bytes()
    path.write_bytes(data[: data.rstrip(b"\n").rfind(b"\n") + 1])
    return f"{path.name} (version 2) fails its checksum"


def _lose_a_file(t: Table) -> str:
    victim = sorted(t.snapshot().files)[0]
    (Path(t.uri) / victim).unlink()
    return f"data file {victim} is missing from storage"


def _foreign_file(t: Table) -> str:
    victim = sorted(t.snapshot().files)[0]
    pq.write_table(pa.table({"id": ["x"], "name": ["y"], "_maintd_op": pa.array([0], pa.int8())}), Path(t.uri) / victim)
    return f"data file {victim} does not match the table schema: column 'id' is of type string"


def _newer_protocol(t: Table) -> str:
    info = CommitInfo(operation="UPGRADE PROTOCOL", timestamp=2**41, txn_id="newer")
    (Path(t.uri) / commit_path(3)).write_bytes(encode_commit([info, Protocol(min_reader_version=8,
                                                                               min_writer_version=8)], version=3))
    return "requires reader protocol version 8; this maintd reads up to version 7"


def _outside_path(t: Table) -> str:
    line = (Path(t.uri) / commit_path(2)).read_text().splitlines()[-1].replace('"path":"', '"path":"../../', 1)
    info = CommitInfo(operation="UPSERT", timestamp=2**41, txn_id="hostile").model_dump_json()
    (Path(t.uri) / commit_path(3)).write_text(f'{{"commit_info":{info}}}\n{line}\n')
    return "is not a normalised path inside the table root"


DAMAGE: list[tuple[str, Callable[[Table], str]]] = [
    ("a truncated commit", _truncate), ("a missing data file", _lose_a_file), ("a foreign data file", _foreign_file),
    ("a newer protocol", _newer_protocol), ("a path outside the table", _outside_path),
]


@pytest.mark.parametrize("damage", [d[1] for d in DAMAGE], ids=[d[0] for d in DAMAGE])
def test_reading_a_damaged_table_prints_one_line_and_exits_1(tmp_path: Path, damage: Callable[[Table], str]) -> None:
    """A damaged table is work that failed (exit 1); a table of a newer protocol is one this maintd cannot take
    (exit 2, as bad input: README, "Exit codes")."""
    table = _table(tmp_path / "t")
    expected = damage(table)

    done = maintd("read", table.uri)

    assert done.returncode == (2 if damage is _newer_protocol else 1), done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in done.stderr, done.stderr
    assert expected in lines[0] and table.uri in lines[0]


def test_gc_names_the_damaged_table_deletes_nothing_in_it_and_reclaims_the_others(tmp_path: Path) -> None:
    broken, healthy = _table(tmp_path / "broken"), _table(tmp_path / "healthy")
    for t in (broken, healthy):
        t.set_properties({"acid.data.retain.hours": 0})
        t.overwrite(pa.table({"id": [9], "name": ["z"]}))
    _truncate(Table.open(broken.uri))
    before = sorted(p for p in Path(broken.uri).rglob("*") if p.is_file())

    done = maintd("gc", broken.uri, healthy.uri, "--orphan-grace-hours", "0", "--force-short-grace")

    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr and "CorruptLogError" not in done.stdout
    assert "fails its checksum" in done.stderr and f"reclamation failed for 1 table(s): {broken.uri}" in done.stderr
    assert sorted(p for p in Path(broken.uri).rglob("*") if p.is_file()) == before
    data = [p for p in Path(healthy.uri).rglob("*.parquet") if "_log" not in p.parts]
    assert len(data) == 1, "the healthy table was reclaimed"
