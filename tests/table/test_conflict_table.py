"""Every cell of the conflict table: a winner commits between a loser's read and its commit.

``CONFLICTS`` (in table_helpers) is the table of docs/format.md ("Conflicts"); a test checks that the two
agree, and one test per cell and isolation level runs the race with the real operations. Both
transactions touch the same partition, and the two maintenance operations the same bucket.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from table_helpers import (
    CONFLICTS,
    LEVELS,
    NONE,
    OPERATIONS,
    Model,
    data_files_on_disk,
    groups,
    race,
    rewrite_buckets,
    sorted_rows,
)

import maintd
from maintd import CommitConflictError, Table
from maintd.execution import CommitOutcome, PlanDoc, PlanTaskDoc, commit_rewrites, execute
from maintd.table.actions import CommitInfo, Protocol

DOC = Path(__file__).resolve().parents[2] / "docs" / "format.md"
PART = {"ds": "p"}
SCHEMA = pa.schema([("id", pa.int64()), ("ds", pa.string()), ("name", pa.string())])


def doc_conflict_table() -> dict[str, dict[str, tuple[str, str]]]:
    """Parse the table between the ``conflict-table`` markers of docs/format.md."""
    text = DOC.read_text()
    body = text.split("<!-- conflict-table:begin -->", 1)[1].split("<!-- conflict-table:end -->", 1)[0]
    lines = [ln.strip() for ln in body.strip().splitlines() if ln.strip().startswith("|")]

    def cells(line: str) -> list[str]:
        return [c.strip().strip("*").strip() for c in line.strip("|").split("|")]

    losers = cells(lines[0])[1:]
    table: dict[str, dict[str, tuple[str, str]]] = {}
    for line in lines[2:]:
        winner, *outcomes = cells(line)
        row = {}
        for loser, outcome in zip(losers, outcomes, strict=True):
            parts = [re.sub(r"[`\s]", "", p) for p in outcome.split("/")]
            row[loser] = (parts[0], parts[-1])
        table[winner] = row
    return table


def test_the_doc_shows_the_tested_conflict_table() -> None:
    assert doc_conflict_table() == CONFLICTS


def test_every_outcome_names_an_exported_conflict_error() -> None:
    for row in CONFLICTS.values():
        for outcome in row.values():
            for name in outcome:
                assert name == NONE or issubclass(getattr(maintd, name), CommitConflictError)


# -- the operations, on a table and on its model ------------------------------------------------------------------


def _rows(ids: range, tag: str) -> list[dict[str, Any]]:
    return [{"id": i, "ds": "p", "name": f"{tag}{i}"} for i in ids]


def _maintenance(kind: str) -> Callable[[Table], CommitOutcome]:
    """Maintenance as maintd runs it: a plan of one bucket of partition p, executed, then ``commit_rewrites``
    (which does not raise on a conflict: it drops or abandons the tasks and records the conflict)."""
    def run(table: Table) -> CommitOutcome:
        snap = table.snapshot()
        (part, bucket), files = next((g, f) for g, f in snap.by_bucket().items() if dict(g[0]) == PART and len(f) > 1)
        clustering = kind == "clustering"
        inputs = tuple(f.path for f in files if not clustering or (f.kind == "delta" and f.level == 0))
        task = PlanTaskDoc(task_id=f"{kind}-{bucket}", kind="cluster" if clustering else "compact",
                           partition=dict(part), bucket=bucket, target_level=1 if clustering else None, inputs=inputs)
        plan = PlanDoc(table_uri=table.uri, read_version=snap.version, tasks=(task,))
        return commit_rewrites(table, plan, execute(plan, table, None))

    return run


RUN: dict[str, Callable[[Table], Any]] = {
    "append": lambda t: t.upsert(pa.Table.from_pylist(_rows(range(100, 104), "new"), schema=SCHEMA)),
    "key delete": lambda t: t.delete(pa.table({"id": [0, 1], "ds": ["p", "p"]})),
    "overwrite": lambda t: t.overwrite(pa.Table.from_pylist(_rows(range(200, 202), "ow"), schema=SCHEMA),
                                       partition=PART),
    "metadata change": lambda t: t.set_properties({"maintd.test.owner": "conflicts"}),
    "clustering": _maintenance("clustering"),
    "compaction": _maintenance("compaction"),
}


def model_apply(model: Model, op: str, version: int) -> None:
    if op == "append":
        model.upsert(version, _rows(range(100, 104), "new"))
    elif op == "key delete":
        model.delete(version, [{"id": 0, "ds": "p"}, {"id": 1, "ds": "p"}])
    elif op == "overwrite":
        model.overwrite(version, _rows(range(200, 202), "ow"), PART)
    else:
        model.unchanged(version)


COMPACT = "compact every bucket of partition p"
SEED: list[Any] = [_rows(range(0, 8), "a"), [{"id": i, "ds": "q", "name": f"q{i}"} for i in range(4)], COMPACT,
                   _rows(range(0, 8, 2), "b"), _rows(range(1, 8, 3), "c")]
SEED_VERSIONS = 1 + len(SEED)  # version 0 creates the table; both buckets of p compact in one commit


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One seeded table per isolation level: each bucket of partition p holds a BaseFile and level-0 files."""
    out = {}
    for level in LEVELS:
        root = tmp_path_factory.mktemp(level) / "t"
        table = Table.create(str(root), SCHEMA, primary_key="id", partition_by="ds", buckets=2,
                             properties={"isolation.level": level})
        for rows in SEED:
            if rows is COMPACT:
                snap = table.snapshot()
                txn = rewrite_buckets(table, snap, [g for g in groups(snap) if dict(g[0]) == PART], "compact")
                assert txn is not None
                txn.commit()
            else:
                table.upsert(pa.Table.from_pylist(rows, schema=SCHEMA))
        assert table.version == SEED_VERSIONS - 1
        out[level] = root
    return out


def seed_model() -> Model:
    model = Model(tuple(SCHEMA.names), ("id",), ("ds",))
    model.unchanged(0)
    for v, rows in enumerate(SEED, 1):
        if rows is COMPACT:
            model.unchanged(v)
        else:
            model.upsert(v, rows)
    return model


CELLS = [(w, lo, lvl) for lvl in LEVELS for w in OPERATIONS for lo in OPERATIONS]


@pytest.mark.parametrize(("winner", "loser", "level"), CELLS, ids=[f"{w} then {lo} ({lvl})" for w, lo, lvl in CELLS])
def test_conflict_table_cell(seeded: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                             winner: str, loser: str, level: str) -> None:
    root = tmp_path / "t"
    shutil.copytree(seeded[level], root)
    base = SEED_VERSIONS - 1
    expected = CONFLICTS[winner][loser][LEVELS.index(level)]
    loser_table, winner_table = Table.open(str(root)), Table.open(str(root))
    model = seed_model()
    model_apply(model, winner, base + 1)
    before_files = data_files_on_disk(root)

    maintenance_loser = loser in ("clustering", "compaction")
    if expected == NONE:
        version = race(monkeypatch, lambda: RUN[loser](loser_table), lambda: RUN[winner](winner_table))
        if isinstance(version, CommitOutcome):
            assert version.conflict_types == [] and version.committed, version
            version = version.version
        if version is not None:
            assert version == base + 2
        assert Table.open(str(root)).version == base + 2
        model_apply(model, loser, base + 2)  # the serial order is: winner, then loser
    elif maintenance_loser:
        outcome = race(monkeypatch, lambda: RUN[loser](loser_table), lambda: RUN[winner](winner_table))
        assert outcome.conflict_types == [expected], outcome
        assert outcome.version is None and not outcome.committed and not outcome.outputs_left
        winning = Table.open(str(root)).history(limit=1)[0].operation
        if outcome.error is not None:  # abandoned: the error names the winner (a DD conflict drops the task)
            assert f"version {base + 1}" in outcome.error and winning in outcome.error, outcome.error
        assert Table.open(str(root)).version == base + 1, "a conflicting commit must not land"
        assert data_files_on_disk(root) - before_files <= _files_added_at(root, base + 1), "outputs deleted"
    else:
        with pytest.raises(CommitConflictError) as caught:
            race(monkeypatch, lambda: RUN[loser](loser_table), lambda: RUN[winner](winner_table))
        assert type(caught.value).__name__ == expected
        assert caught.value.version == base + 1
        assert caught.value.winning_operation == Table.open(str(root)).history(limit=1)[0].operation
        assert Table.open(str(root)).version == base + 1, "a conflicting commit must not land"
        if loser in ("append", "key delete", "overwrite"):  # a writer deletes the files of a commit that failed
            assert data_files_on_disk(root) - before_files <= _files_added_at(root, base + 1)
    assert sorted_rows(Table.open(str(root)).read(), ("ds", "id")) == model.visible()


def _files_added_at(root: Path, version: int) -> set[str]:
    table = Table.open(str(root))
    return set(table.snapshot(version).files) - set(table.snapshot(version - 1).files)


# -- conflicts outside the operation table ------------------------------------------------------------------------


def test_the_same_application_id_conflicts(seeded: dict[str, Path], tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "t"
    shutil.copytree(seeded["WriteSerializable"], root)
    a, b = Table.open(str(root)), Table.open(str(root))
    data = pa.Table.from_pylist(_rows(range(50, 52), "app"), schema=SCHEMA)
    with pytest.raises(maintd.ConcurrentTransactionError, match="same application id: ingest"):
        race(monkeypatch, lambda: a.upsert(data, app_id="ingest", app_version=7),
             lambda: b.upsert(data, app_id="ingest", app_version=7))
    assert Table.open(str(root)).snapshot().app_txns == {"ingest": 7}


def test_a_protocol_change_fails_every_concurrent_writer(seeded: dict[str, Path], tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "t"
    shutil.copytree(seeded["WriteSerializable"], root)
    table = Table.open(str(root))
    v = table.version + 1

    def upgrade() -> None:
        info = CommitInfo(operation="UPGRADE PROTOCOL", timestamp=1, txn_id="upgrade")
        assert table.log.try_commit(v, [info, Protocol(min_reader_version=1, min_writer_version=2)])

    with pytest.raises(maintd.ProtocolChangedError, match=f"UPGRADE PROTOCOL at version {v}"):
        race(monkeypatch, lambda: RUN["append"](table), upgrade)


def test_an_overwrite_fails_when_the_partition_it_read_was_emptied(seeded: dict[str, Path], tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "t"
    shutil.copytree(seeded["WriteSerializable"], root)
    a, b = Table.open(str(root)), Table.open(str(root))
    truncate = pa.Table.from_pylist([], schema=SCHEMA)
    with pytest.raises(maintd.ConcurrentDeleteReadError, match="removed files this transaction read") as caught:
        race(monkeypatch, lambda: RUN["overwrite"](a), lambda: b.overwrite(truncate, partition=PART))
    assert caught.value.paths and all(p.startswith("ds=p/") for p in caught.value.paths)


@pytest.mark.parametrize("level", LEVELS)
def test_operations_on_other_partitions_do_not_conflict(seeded: dict[str, Path], tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch, level: str) -> None:
    root = tmp_path / "t"
    shutil.copytree(seeded[level], root)
    a, b = Table.open(str(root)), Table.open(str(root))
    other = pa.Table.from_pylist([{"id": 9, "ds": "q", "name": "q9"}], schema=SCHEMA)
    version = race(monkeypatch, lambda: a.overwrite(other, partition={"ds": "q"}), lambda: RUN["append"](b))
    assert version == SEED_VERSIONS + 1
