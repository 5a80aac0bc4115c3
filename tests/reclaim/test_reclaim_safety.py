"""The safety nets of a reclamation run: the last check of orphans, incomplete runs, and the watermark.

Each test here fails on a one-line weakening of the code it protects (docs/testing.md, "Mutation testing"):
deleting every planned orphan without the last check against the newest snapshot, reporting a run with a
failed delete as complete, advancing the reclaimed watermark after a failed delete, and checkpoints that
keep (or drop) the wrong tombstones.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa

from maintd import Table, Transaction
from maintd.reclaim import plan_reclamation, reclaim_table
from maintd.reclaim.engine import execute_plan
from maintd.storage import LocalStorage
from maintd.storage.faulty import Fault, FaultPlan
from maintd.table.files.writer import prepare_changes, split_and_write
from maintd.table.log.checkpoint import decode_checkpoint
from maintd.table.log.tablelog import checkpoint_path

HOUR = timedelta(hours=1)
LISTING_SECONDS = 0.01
"""How long a stand-in slow listing takes (simulated), so that a run's reported seconds cannot round to 0."""


def table_with_history(root: Path, commits: int = 4) -> Table:
    """A table with retention 0, one bucket, whose every upsert after the first replaces the one file."""
    table = Table.create(str(root), "id:int64!,name:string", primary_key="id", buckets=1,
                         properties={"acid.data.retain.hours": 0, "log.checkpoint.interval": 1000})
    for i in range(commits):
        table.upsert(pa.table({"id": [i], "name": [f"n{i}"]}))
        table.overwrite(table.read())  # removes every file: tombstones for reclamation to delete
    return table


def written_not_committed(table: Table, rows: pa.Table) -> tuple[Transaction, list[str]]:
    """A writer's transaction whose files are on storage but whose commit is not published yet."""
    snap = table.snapshot()
    txn = table.new_transaction("UPSERT", read_snapshot=snap)
    paths = []
    for add in split_and_write(table.storage, snap.metadata, prepare_changes(rows, None, snap.metadata,
                                                                             table=table.uri)):
        txn.add(add)
        paths.append(add.path)
    return txn, paths


def make_old(root: Path, paths: list[str], now: datetime, hours: float) -> None:
    for p in paths:
        t = (now - timedelta(hours=hours)).timestamp()
        os.utime(root / p, (t, t))


def test_a_planned_orphan_committed_while_reclamation_runs_is_not_deleted(tmp_path: Path) -> None:
    """A writer slow enough for its files to pass the grace commits them after the plan named them orphans:
    the last check against the newest snapshot keeps them, and the committed rows stay readable."""
    table = table_with_history(tmp_path / "t")
    now = datetime.now(UTC)
    txn, paths = written_not_committed(table, pa.table({"id": [77], "name": ["slow writer"]}))
    make_old(tmp_path / "t", paths, now, hours=100)
    plan = plan_reclamation(table, now=now)
    assert sorted(f.path for f in plan.orphan_files) == sorted(paths), "the race needs them planned as orphans"
    committed = []

    def commit_during_the_run(step: str) -> None:
        if step == "log" and not committed:  # after the plan, before the orphan step
            committed.append(txn.commit())

    report = execute_plan(table, plan, on_step=commit_during_the_run)

    assert committed, "the writer must have committed while reclamation ran"
    assert report.orphan_files_deleted == 0 and report.complete
    assert all((tmp_path / "t" / p).exists() for p in paths)
    assert {"id": 77, "name": "slow writer"} in Table.open(table.uri).read().to_pylist()


def test_the_last_check_still_deletes_the_orphans_nobody_committed(tmp_path: Path) -> None:
    table = table_with_history(tmp_path / "t")
    now = datetime.now(UTC)
    txn, kept = written_not_committed(table, pa.table({"id": [77], "name": ["committed"]}))
    _, dead = written_not_committed(table, pa.table({"id": [78], "name": ["crashed"]}))
    make_old(tmp_path / "t", kept + dead, now, hours=100)
    plan = plan_reclamation(table, now=now)
    txn.commit()

    report = execute_plan(table, plan)

    assert report.orphan_files_deleted == len(dead) and report.orphan_bytes_deleted > 0
    assert all((tmp_path / "t" / p).exists() for p in kept) and not any((tmp_path / "t" / p).exists() for p in dead)


def test_a_failed_data_delete_leaves_the_run_incomplete_and_the_watermark_where_it_was(tmp_path: Path) -> None:
    table = table_with_history(tmp_path / "t")
    planned = plan_reclamation(table)
    assert planned.data_files, "the history must leave data files to delete"
    faults = FaultPlan([Fault("fail", op="delete", path=planned.data_files[0].path, times=1)])

    report = reclaim_table(Table(faults.wrap(LocalStorage(table.uri))))

    assert len(faults.fired) == 1, "the delete must have failed"
    assert not report.complete
    assert report.data_files_deleted == len(planned.data_files) - 1
    assert table.log.reclaimed_watermark() is None, "a file the watermark covers is still on storage"
    assert (tmp_path / "t" / planned.data_files[0].path).exists()

    again = reclaim_table(Table.open(table.uri))

    assert again.complete and again.data_files_deleted == 1
    assert not (tmp_path / "t" / planned.data_files[0].path).exists()
    assert table.log.reclaimed_watermark() == planned.retained_timestamp


def test_a_failed_orphan_delete_leaves_the_run_incomplete(tmp_path: Path) -> None:
    table = table_with_history(tmp_path / "t")
    now = datetime.now(UTC)
    _, dead = written_not_committed(table, pa.table({"id": [78], "name": ["crashed"]}))
    make_old(tmp_path / "t", dead, now, hours=100)
    faults = FaultPlan([Fault("fail", op="delete", path=dead[0], times=1)])

    report = reclaim_table(Table(faults.wrap(LocalStorage(table.uri))), now=now)

    assert len(faults.fired) == 1 and not report.complete and report.orphan_files_deleted == len(dead) - 1
    assert table.log.reclaimed_watermark() is None
    assert reclaim_table(Table.open(table.uri), now=now).complete
    assert table.log.reclaimed_watermark() is not None


def test_a_complete_run_advances_the_watermark_to_the_oldest_retained_commit(tmp_path: Path) -> None:
    table = table_with_history(tmp_path / "t")
    planned = plan_reclamation(table)

    report = reclaim_table(table)

    assert report.complete and report.data_files_deleted == len(planned.data_files) > 0
    assert table.log.reclaimed_watermark() == planned.retained_timestamp
    # A later run with nothing older to delete never moves it back.
    table.log.advance_reclaimed_watermark(0, planned.retained_timestamp - 1)
    assert table.log.reclaimed_watermark() == planned.retained_timestamp


def test_checkpoints_drop_exactly_the_tombstones_below_the_watermark(tmp_path: Path) -> None:
    """Below the watermark a tombstone's file is gone: a checkpoint leaves it out, or checkpoints grow with
    every file ever removed. Above it the file may still be on storage: the tombstone must stay, or the
    next reclamation would never delete that file."""
    table = table_with_history(tmp_path / "t")
    reclaim_table(table)
    mark = table.log.reclaimed_watermark()
    assert mark is not None
    table.overwrite(table.read())  # tombstones newer than the watermark
    snapshot = table.snapshot()
    below = {p for p, r in snapshot.tombstones.items() if r.deletion_time <= mark}
    above = {p for p, r in snapshot.tombstones.items() if r.deletion_time > mark}
    assert below and above, "the snapshot must hold tombstones on both sides of the watermark"

    table.log.write_checkpoint(snapshot)

    path = checkpoint_path(snapshot.version)
    state = decode_checkpoint((tmp_path / "t" / path).read_bytes(), uri=table.uri, path=path,
                              version=snapshot.version)
    assert set(state.tombstones) == above
    assert set(state.files) == set(snapshot.files)
    reclaim_table(Table.open(table.uri))
    assert not any((tmp_path / "t" / p).exists() for p in above), "the tombstones kept let them be reclaimed"


def test_a_dry_run_says_so_and_how_long_it_took(tmp_path: Path, monkeypatch: Any) -> None:
    import time

    table = table_with_history(tmp_path / "t")
    real_walk = LocalStorage.walk

    def slow_walk(self: LocalStorage, path: str = "") -> Any:  # a listing that takes a measurable time
        time.sleep(LISTING_SECONDS)
        return real_walk(self, path)

    monkeypatch.setattr(LocalStorage, "walk", slow_walk)
    started = time.monotonic()
    report = reclaim_table(table, dry_run=True)
    took = time.monotonic() - started
    assert report.dry_run and report.data_files_deleted > 0 and (tmp_path / "t" / "_log").exists()
    assert 0 < report.seconds <= took + 0.001 and report.seconds == round(report.seconds, 3)
