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

import maintd
from maintd import (
    CommitConflictError,
    ConcurrentAppendError,
    ConcurrentDeleteDeleteError,
    ConcurrentDeleteReadError,
    ConcurrentTransactionError,
    MetadataChangedError,
    PinConflictError,
    ProtocolChangedError,
    Table,
)
from maintd.execution import CommitOutcome, PlanDoc, PlanTaskDoc, commit_rewrites, execute
from maintd.table.log.actions import (
    AddFile,
    CommitInfo,
    Expire,
    Field_,
    Metadata,
    Pin,
    Protocol,
    RemoveFile,
    Txn,
)
from maintd.table.log.conflicts import AlreadyCommitted, TxnFootprint, WinningCommit, check_winner, state_change
from maintd.table.log.snapshot import Snapshot

from ..table_helpers import (
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

DOC = Path(__file__).resolve().parents[3] / "docs" / "format.md"
PART = {"ds": "p"}
SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("ds", pa.string()), ("name", pa.string())])


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


# -- the checks, one winning commit at a time -----------------------------------------------------------------------


def _add(path: str, ds: str = "p", *, data_change: bool = True) -> AddFile:
    return AddFile(path=path, partition={"ds": ds}, bucket=0, kind="delta", rows=1, bytes=1, min_version=1,
                   max_version=1, min_commit_time=0, max_commit_time=0, data_change=data_change)


def _remove(path: str, *, data_change: bool = True) -> RemoveFile:
    return RemoveFile(path=path, deletion_time=5, data_change=data_change, partition={"ds": "p"})


def _winner(**changes: Any) -> WinningCommit:
    fields: dict[str, Any] = {"version": 7, "operation": "WRITE", "txn_id": "theirs", "is_blind_append": False,
                              "protocol_changed": False, "metadata_changed": False, "app_ids": frozenset(),
                              "adds": (), "removes": ()}
    return WinningCommit(**(fields | changes))


def _footprint(level: str = "WriteSerializable", **changes: Any) -> TxnFootprint:
    return TxnFootprint(level, ("ds",), **changes)


def _conflict(fp: TxnFootprint, w: WinningCommit) -> CommitConflictError:
    with pytest.raises(CommitConflictError) as caught:
        check_winner(fp, w, "mine")
    return caught.value


def _pin(pin_id: str, version: int) -> Pin:
    return Pin(id=pin_id, version=version, created=0, expires=10**15)


def test_a_winning_commit_is_read_from_its_actions() -> None:
    info = CommitInfo(operation="MERGE", timestamp=1, txn_id="t1", is_blind_append=True)
    metadata = Metadata(table_id="t", fields=(Field_(name="id", type="long"),), primary_key=("id",), buckets=1,
                        created_time=0)
    add, remove = _add("ds=p/a.parquet"), _remove("ds=p/b.parquet")
    actions = [info, Protocol(min_reader_version=1, min_writer_version=2), metadata, Txn(app_id="x", version=1,
               last_updated=0), Txn(app_id="y", version=2, last_updated=0), add, remove, _pin("p2", 5),
               _pin("p1", 3), Expire(before=4)]
    assert WinningCommit.from_actions(9, actions) == WinningCommit(
        version=9, operation="MERGE", txn_id="t1", is_blind_append=True, protocol_changed=True,
        metadata_changed=True, app_ids=frozenset({"x", "y"}), adds=(add,), removes=(remove,), pinned=(3, 5),
        expired_before=4)


def test_a_commit_without_commit_info_is_an_unknown_operation_that_changes_nothing_but_its_files() -> None:
    add = _add("ds=p/a.parquet")
    w = WinningCommit.from_actions(2, [add])
    assert w == WinningCommit(version=2, operation="UNKNOWN", txn_id=None, is_blind_append=False,
                              protocol_changed=False, metadata_changed=False, app_ids=frozenset(), adds=(add,),
                              removes=(), pinned=(), expired_before=None)
    assert w.is_blind_append is False
    info = CommitInfo(operation="WRITE", timestamp=1, txn_id="t1")
    assert WinningCommit.from_actions(2, [info, add]).is_blind_append is False


def test_the_own_earlier_attempt_is_reported_before_any_conflict() -> None:
    fp = _footprint(read_whole_table=True, read_files={"ds=p/a.parquet"}, removes={"ds=p/a.parquet"})
    w = _winner(txn_id="mine", protocol_changed=True, metadata_changed=True, adds=(_add("ds=p/b.parquet"),),
                removes=(_remove("ds=p/a.parquet"),))
    assert check_winner(fp, w, "mine") == AlreadyCommitted(7)
    assert check_winner(_footprint(), _winner(), "mine") is None


def test_a_protocol_change_is_checked_first_and_names_no_paths() -> None:
    error = _conflict(_footprint(), _winner(protocol_changed=True, metadata_changed=True,
                                            app_ids=frozenset({"x"})))
    assert type(error) is ProtocolChangedError
    assert str(error) == "concurrent WRITE at version 7 changed the table protocol; reopen the table and retry"
    assert (error.version, error.winning_operation, error.paths) == (7, "WRITE", ())


def test_a_metadata_change_is_checked_before_application_ids() -> None:
    error = _conflict(_footprint(app_ids={"x"}), _winner(metadata_changed=True, app_ids=frozenset({"x"})))
    assert type(error) is MetadataChangedError
    assert str(error) == ("concurrent WRITE at version 7 changed the table metadata or properties; re-read the "
                          "table and retry")
    assert error.paths == ()


def test_only_a_shared_application_id_conflicts_and_it_is_checked_before_pins() -> None:
    assert check_winner(_footprint(app_ids={"x"}), _winner(app_ids=frozenset({"y"})), "mine") is None
    error = _conflict(_footprint(app_ids={"x", "z"}, pins={1}),
                      _winner(app_ids=frozenset({"x", "y"}), expired_before=5))
    assert type(error) is ConcurrentTransactionError
    assert str(error) == "concurrent WRITE at version 7 committed for the same application id: x"
    assert error.paths == ("x",)


def test_a_pin_conflicts_with_a_winner_expiring_its_oldest_version_and_before_appends() -> None:
    read = _footprint(read_whole_table=True, pins={3, 5})
    error = _conflict(read, _winner(expired_before=4, adds=(_add("ds=p/a.parquet"),)))
    assert type(error) is PinConflictError
    assert str(error) == ("concurrent WRITE at version 7 expired every version before 4, so version 3 cannot be "
                          "pinned any more; pin version 4 or newer")
    assert check_winner(_footprint(pins={3, 5}), _winner(expired_before=3), "mine") is None
    assert check_winner(_footprint(pins={3}), _winner(), "mine") is None
    assert check_winner(_footprint(), _winner(expired_before=4), "mine") is None


def test_an_expiry_conflicts_with_a_winner_pinning_a_version_it_expires() -> None:
    error = _conflict(_footprint(expires_before=5), _winner(pinned=(2, 4, 6)))
    assert type(error) is PinConflictError
    assert str(error) == ("concurrent WRITE at version 7 pinned version 2, which this transaction would expire; "
                          "plan the reclamation again (it keeps pinned versions)")
    assert check_winner(_footprint(expires_before=5), _winner(pinned=(5, 6)), "mine") is None
    assert check_winner(_footprint(), _winner(pinned=(2,)), "mine") is None


def test_an_append_where_the_transaction_read_conflicts_unless_blind_under_write_serializable() -> None:
    adds = (_add("ds=p/b.parquet"), _add("ds=p/a.parquet"), _add("ds=p/m.parquet", data_change=False),
            _add("ds=q/c.parquet", "q"))
    error = _conflict(_footprint(read_partitions={(("ds", "p"),)}), _winner(adds=adds))
    assert type(error) is ConcurrentAppendError
    assert str(error) == ("concurrent WRITE at version 7 added files where this transaction read: ds=p/a.parquet, "
                          "ds=p/b.parquet")
    assert error.paths == ("ds=p/a.parquet", "ds=p/b.parquet")
    blind = _winner(adds=adds, is_blind_append=True)
    assert check_winner(_footprint(read_partitions={(("ds", "p"),)}), blind, "mine") is None
    error = _conflict(_footprint("Serializable", read_partitions={(("ds", "p"),)}), blind)
    assert type(error) is ConcurrentAppendError


def test_appends_elsewhere_or_by_maintenance_or_to_maintenance_never_conflict() -> None:
    other = _winner(adds=(_add("ds=q/c.parquet", "q"),))
    assert check_winner(_footprint("Serializable", read_partitions={(("ds", "p"),)}), other, "mine") is None
    assert type(_conflict(_footprint("Serializable", read_whole_table=True), other)) is ConcurrentAppendError
    rewrite = _winner(adds=(_add("ds=p/m.parquet", data_change=False),))
    assert check_winner(_footprint("Serializable", read_whole_table=True), rewrite, "mine") is None
    maintenance = _footprint("Serializable", read_whole_table=True, data_change=False, replace=True)
    assert check_winner(maintenance, _winner(adds=(_add("ds=p/a.parquet"),)), "mine") is None
    assert maintenance.removes == set()


def test_a_replace_takes_over_what_a_winner_added_in_its_partitions() -> None:
    fp = _footprint(read_partitions={(("ds", "p"),)}, replace=True, removes={"ds=p/old.parquet"})
    w = _winner(is_blind_append=True, adds=(_add("ds=p/a.parquet"), _add("ds=q/c.parquet", "q")))
    assert check_winner(fp, w, "mine") is None
    assert fp.removes == {"ds=p/old.parquet", "ds=p/a.parquet"}
    fp = _footprint(read_partitions={(("ds", "p"),)}, replace=True)
    assert check_winner(fp, _winner(adds=(_add("ds=p/m.parquet", data_change=False),)), "mine") is None
    assert fp.removes == {"ds=p/m.parquet"}


def test_removing_a_file_the_transaction_read_conflicts_only_as_a_data_change() -> None:
    paths = [f"ds=p/{c}.parquet" for c in "abcdefg"]
    fp = _footprint(read_files=set(paths) | {"ds=p/z.parquet"})
    error = _conflict(fp, _winner(removes=tuple(_remove(p) for p in reversed(paths))))
    assert type(error) is ConcurrentDeleteReadError
    assert str(error) == ("concurrent WRITE at version 7 removed files this transaction read: ds=p/a.parquet, "
                          "ds=p/b.parquet, ds=p/c.parquet, ds=p/d.parquet, ds=p/e.parquet and 2 more")
    assert error.paths == tuple(paths)
    five = _conflict(_footprint(read_files=set(paths[:5])), _winner(removes=tuple(_remove(p) for p in paths[:5])))
    assert str(five).endswith("read: " + ", ".join(paths[:5]))
    six = _conflict(_footprint(read_files=set(paths[:6])), _winner(removes=tuple(_remove(p) for p in paths[:6])))
    assert str(six).endswith(", ds=p/e.parquet and 1 more")
    fp = _footprint(read_files={"ds=p/a.parquet"})
    assert check_winner(fp, _winner(removes=(_remove("ds=p/a.parquet", data_change=False),)), "mine") is None
    assert fp.read_files == {"ds=p/a.parquet"}


def test_removing_a_file_the_transaction_removes_conflicts_even_when_rewritten() -> None:
    for data_change in (True, False):
        error = _conflict(_footprint(removes={"ds=p/a.parquet", "ds=p/b.parquet"}),
                          _winner(removes=(_remove("ds=p/a.parquet", data_change=data_change),
                                           _remove("ds=p/c.parquet"))))
        assert type(error) is ConcurrentDeleteDeleteError
        assert str(error) == ("concurrent WRITE at version 7 removed files this transaction also removes: "
                              "ds=p/a.parquet")
        assert error.paths == ("ds=p/a.parquet",)
    assert check_winner(_footprint(removes={"ds=p/b.parquet"}), _winner(removes=(_remove("ds=p/a.parquet"),)),
                        "mine") is None


def test_a_replace_lets_go_of_rewritten_files_but_not_of_removed_ones() -> None:
    fp = _footprint(replace=True, read_files={"ds=p/a.parquet", "ds=p/b.parquet"},
                    removes={"ds=p/a.parquet", "ds=p/b.parquet", "ds=p/c.parquet"})
    assert check_winner(fp, _winner(removes=(_remove("ds=p/a.parquet", data_change=False),)), "mine") is None
    assert fp.read_files == {"ds=p/b.parquet"}
    assert fp.removes == {"ds=p/b.parquet", "ds=p/c.parquet"}
    error = _conflict(fp, _winner(removes=(_remove("ds=p/c.parquet"), _remove("ds=p/d.parquet"))))
    assert type(error) is ConcurrentDeleteDeleteError
    assert error.paths == ("ds=p/c.parquet",)


def _snapshot(version: int, files: dict[str, AddFile], **changes: Any) -> Snapshot:
    metadata = Metadata(table_id="t", fields=(Field_(name="id", type="long"), Field_(name="ds", type="string")),
                        primary_key=("id",), partition_by=("ds",), buckets=1, created_time=0)
    fields: dict[str, Any] = {"version": version, "timestamp": version, "protocol": Protocol(),
                              "metadata": metadata, "files": files}
    return Snapshot(**(fields | changes))


def test_the_state_change_between_two_snapshots_stands_in_for_the_commits_between_them() -> None:
    a, b, c, d = (_add(f"ds=p/{n}.parquet") for n in "abcd")
    d2 = d.model_copy(update={"rows": 2})
    gone = _remove("ds=p/a.parquet", data_change=False)
    before = _snapshot(3, {"ds=p/e.parquet": _add("ds=p/e.parquet"), "ds=p/a.parquet": a, "ds=p/b.parquet": b,
                           "ds=p/d.parquet": d},
                       app_txns={"x": 1, "y": 2}, pins={"p1": _pin("p1", 1)})
    after = _snapshot(6, {"ds=p/b.parquet": b, "ds=p/c.parquet": c, "ds=p/d.parquet": d2},
                      tombstones={"ds=p/a.parquet": gone}, app_txns={"x": 1, "y": 3, "z": 1},
                      pins={"p1": _pin("p1", 1), "p3": _pin("p3", 5), "p2": _pin("p2", 4)})
    assert state_change(before, after) == WinningCommit(
        version=6, operation="commits 4..6 (reclaimed, compared by state)", txn_id=None, is_blind_append=False,
        protocol_changed=False, metadata_changed=False, app_ids=frozenset({"y", "z"}), adds=(c, d2),
        removes=(gone, RemoveFile(path="ds=p/e.parquet", deletion_time=0, data_change=True)), pinned=(4, 5),
        expired_before=4)


def test_the_state_change_sees_protocol_metadata_and_expiry_changes() -> None:
    before = _snapshot(3, {})
    upgraded = _snapshot(6, {}, protocol=Protocol(min_writer_version=3),
                         metadata=before.metadata.model_copy(update={"properties": {"k": "v"}}),
                         expired=Expire(before=6))
    w = state_change(before, upgraded)
    assert (w.protocol_changed, w.metadata_changed, w.expired_before) == (True, True, 6)
    w = state_change(before, _snapshot(6, {}, expired=Expire(before=2)))
    assert (w.protocol_changed, w.metadata_changed, w.expired_before) == (False, False, 4)
