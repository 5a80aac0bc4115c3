"""The cells of the pin conflict table (docs/format.md, "Pins"): a winner commits between a loser's read and its
commit; the doc's table and these outcomes agree, and each cell runs the race with the real operations."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.acero  # imported before freezegun swaps datetime.date, which pyarrow checks on import
import pyarrow.compute
import pyarrow.dataset
import pyarrow.parquet
import pytest
from freezegun import freeze_time

from maintd import PinConflictError, Table
from maintd.reclaim import plan_reclamation, purge_table
from maintd.reclaim.retention import record_expiry

from .table_helpers import race

DOC = Path(__file__).resolve().parents[2] / "docs" / "format.md"
T0 = datetime(2026, 1, 5, 8, 0, tzinfo=UTC)
LATER = T0 + timedelta(hours=10)
OK, PIN = "—", "PinConflictError"
OPERATIONS = ("pin", "unpin", "reclamation", "purge", "append")
PIN_CONFLICTS: dict[str, dict[str, str]] = {
    "pin": {"pin": OK, "unpin": OK, "reclamation": PIN, "purge": PIN, "append": OK},
    "unpin": dict.fromkeys(OPERATIONS, OK),
    "reclamation": {"pin": PIN, "unpin": OK, "reclamation": OK, "purge": OK, "append": OK},
    "purge": {"pin": PIN, "unpin": OK, "reclamation": OK, "purge": OK, "append": OK},
    "append": dict.fromkeys(OPERATIONS, OK),
}


def doc_pin_table() -> dict[str, dict[str, str]]:
    body = DOC.read_text().split("<!-- pin-conflict-table:begin -->", 1)[1].split("<!-- pin-conflict-table:end -->")[0]
    lines = [ln.strip() for ln in body.strip().splitlines() if ln.strip().startswith("|")]

    def cells(line: str) -> list[str]:
        return [re.sub(r"[`*]", "", c).strip() for c in line.strip("|").split("|")]

    losers = cells(lines[0])[1:]
    return {(row := cells(line))[0]: dict(zip(losers, row[1:], strict=True)) for line in lines[2:]}


def test_the_doc_shows_the_tested_pin_conflict_table() -> None:
    assert doc_pin_table() == PIN_CONFLICTS


def seeded(root: Path) -> tuple[Table, str]:
    """Versions 0-4 (3 overwrites the table), retention 1 h, and a pin of version 3 (version 5) to unpin."""
    table = Table.create(str(root), "id:int64!,name:string", primary_key="id", buckets=2,
                         properties={"acid.data.retain.hours": 1})
    table.upsert(pa.table({"id": [1, 2], "name": ["a", "b"]}))
    table.upsert(pa.table({"id": [3], "name": ["c"]}))
    table.overwrite(pa.table({"id": [9], "name": ["z"]}))
    table.upsert(pa.table({"id": [10], "name": ["y"]}))
    return table, table.pin(3, timedelta(hours=100), "held").id


def operation(name: str, table: Table, held: str) -> Callable[[], Any]:
    return {
        "pin": lambda: table.pin(2, timedelta(hours=100)),  # retained by the clock; reclamation at LATER expires it
        "unpin": lambda: table.unpin(held),
        "reclamation": lambda: record_expiry(table, plan_reclamation(table, now=LATER)),
        "purge": lambda: purge_table(table, now=LATER, force_unpin=True),
        "append": lambda: table.upsert(pa.table({"id": [50], "name": ["n"]})),
    }[name]


CELLS = [(w, lo) for w in OPERATIONS for lo in OPERATIONS]


@pytest.mark.parametrize(("winner", "loser"), CELLS, ids=[f"{w} then {lo}" for w, lo in CELLS])
def test_pin_conflict_cell(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, winner: str, loser: str) -> None:
    with freeze_time(T0 + timedelta(minutes=5)):
        table, held = seeded(tmp_path / "t")
        base = table.version
        loser_table, winner_table = Table.open(table.uri), Table.open(table.uri)
        run_loser, run_winner = operation(loser, loser_table, held), operation(winner, winner_table, held)
        if PIN_CONFLICTS[winner][loser] == OK:
            race(monkeypatch, run_loser, run_winner)
            assert Table.open(table.uri).version == base + 2, "both landed"
        else:
            with pytest.raises(PinConflictError) as caught:
                race(monkeypatch, run_loser, run_winner)
            assert caught.value.version == base + 1
            assert Table.open(table.uri).version == base + 1, "a conflicting commit must not land"
        final = Table.open(table.uri).snapshot()
        pinned = {p.version for p in final.pins.values()}
        assert not (pinned and final.expired_before > min(pinned)), "never a pin of a version recorded as expired"
