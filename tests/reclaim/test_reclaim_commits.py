"""Transactions whose next version is reclaimed while they run: they land later, or conflict, never vanish."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from maintd import ConcurrentDeleteDeleteError, MetadataChangedError, Table, Transaction
from maintd.reclaim import reclaim_table
from maintd.table.files.writer import prepare_changes, split_and_write
from maintd.table.log.tablelog import TableLog, checkpoint_path, commit_path


def table_with_history(root: Path) -> Table:
    table = Table.create(str(root), "id:int64!,name:string", primary_key="id", buckets=1,
                         properties={"acid.data.retain.hours": 0})
    for i in range(3):
        table.upsert(pa.table({"id": [i], "name": [f"n{i}"]}))
    return table


def pending_upsert(table: Table, rows: pa.Table) -> Transaction:
    """A writer's transaction with its data written, read at the current version, not committed yet."""
    snap = table.snapshot()
    txn = table.new_transaction("UPSERT", read_snapshot=snap)
    for add in split_and_write(table.storage, snap.metadata, prepare_changes(rows, None, snap.metadata,
                                                                             table=table.uri)):
        txn.add(add)
    return txn


def advance_and_reclaim(table: Table, commits: int) -> None:
    """Other writers commit, then reclamation (retention 0) deletes every commit before the latest."""
    other = Table.open(table.uri)
    for i in range(commits):
        other.upsert(pa.table({"id": [100 + i], "name": ["other"]}))
    latest = other.version
    report = reclaim_table(other)
    assert report.oldest_retained_version == latest and report.expire_version == latest + 1


def test_a_writer_whose_next_version_was_reclaimed_lands_after_the_latest(tmp_path: Path) -> None:
    table = table_with_history(tmp_path / "t")
    txn = pending_upsert(table, pa.table({"id": [42], "name": ["late"]}))
    read_version = txn.read_snapshot.version
    advance_and_reclaim(table, commits=3)
    assert not (tmp_path / "t" / commit_path(read_version + 1)).exists(), "the version it will try was reclaimed"

    version = txn.commit()

    assert version == read_version + 5, "after the 3 commits and reclamation's expire commit"
    assert not (tmp_path / "t" / commit_path(read_version + 1)).exists(), "no commit is left in the reclaimed past"
    got = {r["id"]: r["name"] for r in Table.open(table.uri).read().to_pylist()}
    assert got[42] == "late" and got[100] == got[102] == "other" and len(got) == 7


def test_a_rewrite_whose_input_was_removed_in_reclaimed_commits_conflicts(tmp_path: Path) -> None:
    table = table_with_history(tmp_path / "t")
    snap = table.snapshot()
    rewrite = table.new_transaction("OPTIMIZE", read_snapshot=snap)
    victim = sorted(snap.files)[0]
    rewrite.remove(victim, data_change=False)
    table.overwrite(table.read())  # removes every file the rewrite read
    advance_and_reclaim(table, commits=2)

    with pytest.raises(ConcurrentDeleteDeleteError) as err:
        rewrite.commit()

    assert victim in err.value.paths and "compared by state" in str(err.value)


def test_a_metadata_change_in_reclaimed_commits_fails_a_concurrent_overwrite(tmp_path: Path) -> None:
    table = table_with_history(tmp_path / "t")
    snap = table.snapshot()
    overwrite = table.new_transaction("OVERWRITE", read_snapshot=snap)
    overwrite.replace(None)
    Table.open(table.uri).set_properties({"log.checkpoint.interval": 3})
    advance_and_reclaim(table, commits=2)

    with pytest.raises(MetadataChangedError):
        overwrite.commit()


@pytest.mark.parametrize("kind", ["adds", "removes only", "metadata"])
def test_a_commit_that_landed_is_recognised_even_once_reclamation_passed_it(tmp_path: Path, kind: str) -> None:
    """The check after publishing must not mistake a commit that landed (and that a newer checkpoint
    holds) for one published into the reclaimed past, whatever the commit carries."""
    table = table_with_history(tmp_path / "t")
    if kind == "adds":
        version = table.upsert(pa.table({"id": [7], "name": ["mine"]}))
    elif kind == "removes only":
        txn = table.new_transaction("OPTIMIZE")
        txn.remove(sorted(txn.read_snapshot.files)[0], data_change=False)
        version = txn.commit()
    else:
        version = table.set_properties({"log.checkpoint.interval": 4})
    txn_id = table.log.read_commit_txn(version)
    assert txn_id is not None
    advance_and_reclaim(table, commits=2)
    assert not table.log.commit_exists(version - 1) and not table.log.commit_exists(version)

    assert table.log.txn_in_history(version) == txn_id, "the checkpoint records the commit it summarises"


# -- publishing into removed history (a writer behind a reclamation) ------------------------------------------------


def table_behind(root: Path) -> tuple[Table, Transaction, pa.Table]:
    """A table (retention 0, a checkpoint every 2 versions) with a writer that read version 3 and will try 4,
    a checkpoint version, while others commit versions 4 to 7."""
    table = Table.create(str(root), "id:int64!,name:string", primary_key="id", buckets=1,
                         properties={"acid.data.retain.hours": 0, "log.checkpoint.interval": 2})
    for i in range(3):
        table.upsert(pa.table({"id": [i], "name": [f"n{i}"]}))
    rows = pa.table({"id": [42], "name": ["late"]})
    txn = pending_upsert(Table.open(table.uri), rows)
    other = Table.open(table.uri)
    for i in range(4):
        other.upsert(pa.table({"id": [100 + i], "name": ["other"]}))
    assert txn.read_snapshot.version == 3 and other.version == 7 and other.log.checkpoint_exists(4)
    return table, txn, rows


def test_a_writer_committing_right_after_reclamation_deleted_its_next_commit_lands_in_the_history(
        tmp_path: Path) -> None:
    """Reclamation (retention 0) deletes the commits before version 7; right after commit 4 (the version the
    writer will try) is gone, the writer commits. Its rows must be in the table, whatever it is told."""
    table, txn, _ = table_behind(tmp_path / "t")
    acknowledged: list[int] = []

    def commit_after_version_4_is_deleted(step: str) -> None:
        if step == "log" and not acknowledged and not table.log.commit_exists(4):
            acknowledged.append(txn.commit())

    reclaim_table(Table.open(table.uri), on_step=commit_after_version_4_is_deleted)

    assert acknowledged, "the writer committed during the reclamation"
    final = Table.open(table.uri)
    assert {r["id"]: r["name"] for r in final.read().to_pylist()}.get(42) == "late", "acknowledged rows are visible"
    assert acknowledged[0] == 9, "after reclamation's expire commit at 8"
    assert final.log.txn_in_history(acknowledged[0]) == txn.txn_id, "the acknowledged version holds the commit"


def test_a_commit_published_into_removed_history_is_taken_back_though_a_stale_checkpoint_names_its_version(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The writer checks that the commit it builds on exists, then reclamation runs before its publish: the
    publish of version 4 succeeds (the old commit 4 is gone) below the checkpoint at 7, where no reader
    looks. A checkpoint of the old version 4 is left behind (a reclamation that stopped between its steps
    would leave one): it records the old commit's transaction, not ours, so it proves nothing for us."""
    table, txn, _ = table_behind(tmp_path / "t")
    stale = (tmp_path / "t" / checkpoint_path(4)).read_bytes()
    real = TableLog.try_commit
    published: list[int] = []
    state = {"reclaimed": False, "inside": False}

    def reclaim_then_publish(self: TableLog, version: int, actions: Any, **kwargs: Any) -> bool:
        if state["inside"]:  # reclamation's own expire commit (at 8)
            return real(self, version, actions, **kwargs)
        if not state["reclaimed"]:
            state["inside"] = True
            reclaim_table(Table.open(table.uri))
            state["inside"], state["reclaimed"] = False, True
            (tmp_path / "t" / checkpoint_path(4)).write_bytes(stale)
        published.append(version)
        return real(self, version, actions, **kwargs)

    monkeypatch.setattr(TableLog, "try_commit", reclaim_then_publish)
    version = txn.commit()

    assert published[0] == 4 and version == 9
    final = Table.open(table.uri)
    assert final.log.read_commit_txn(4) != txn.txn_id, "the commit published into removed history was taken back"
    assert final.log.txn_in_history(9) == txn.txn_id
    assert {r["id"]: r["name"] for r in final.read().to_pylist()}[42] == "late"


def test_a_commit_that_cannot_be_deleted_stops_the_log_step_so_the_log_left_stays_unbroken(tmp_path: Path) -> None:
    """Were later commits deleted past one that could not be, a writer that built on the one left behind
    would find it there and take its own publish (into removed history) for a landed commit."""
    from maintd.storage import LocalStorage
    from maintd.storage.faulty import Fault, FaultPlan

    table = table_with_history(tmp_path / "t")
    other = Table.open(table.uri)
    for i in range(3):
        other.upsert(pa.table({"id": [100 + i], "name": ["other"]}))
    plan = FaultPlan([Fault("fail", op="delete", path=commit_path(2), times=1)])
    files = {p.name for p in (tmp_path / "t").rglob("*.parquet") if "_log" not in p.parts}

    report = reclaim_table(Table(plan.wrap(LocalStorage(table.uri))))

    assert not report.complete and report.data_files_deleted == 0
    left = sorted(v for v in range(10) if table.log.commit_exists(v))
    assert left == list(range(2, 7 + 1)), "nothing after the commit that could not be deleted went"
    assert {p.name for p in (tmp_path / "t").rglob("*.parquet") if "_log" not in p.parts} == files
    latest = Table.open(table.uri).version
    assert latest == 6 + 1, "reclamation recorded what it expires before it deleted anything"
    again = reclaim_table(Table.open(table.uri))
    assert again.complete and [v for v in range(latest + 1) if table.log.commit_exists(v)] == [6, 7]


def test_a_commit_left_in_removed_history_is_never_taken_for_the_latest_or_the_oldest_version(tmp_path: Path) -> None:
    """A writer that dies right after publishing into removed history leaves its file there; with a hint that
    names a checkpoint reclamation deleted, probing from the hint would stop at that file, and a binary
    search for the oldest commit could land on it (its recent commit time then passing for the oldest
    retained version's). The latest version, and reclamation's oldest version, come from the unbroken run
    of commits ending at the latest."""
    from maintd.reclaim import plan_reclamation
    from maintd.table.log.actions import CommitInfo
    from maintd.table.log.commitfile import encode_commit
    from maintd.table.log.tablelog import LAST_CHECKPOINT

    table = table_with_history(tmp_path / "t")
    other = Table.open(table.uri)
    for i in range(4):
        other.upsert(pa.table({"id": [100 + i], "name": ["other"]}))
    reclaim_table(Table.open(table.uri))
    expected = sorted(Table.open(table.uri).read().to_pylist(), key=lambda r: r["id"])
    left = CommitInfo(operation="UPSERT", timestamp=2**41, txn_id="published-into-removed-history")
    (tmp_path / "t" / commit_path(3)).write_bytes(encode_commit([left], version=3))
    (tmp_path / "t" / LAST_CHECKPOINT).write_text('{"version": 3, "files": 1}')

    reopened = Table.open(table.uri)
    assert reopened.version == 8, "the 7 writes and reclamation's expire commit"
    assert sorted(reopened.read().to_pylist(), key=lambda r: r["id"]) == expected
    plan = plan_reclamation(reopened)
    assert plan.oldest_available_version == 7 and commit_path(3) in [f.path for f in plan.log_files]
    reclaim_table(reopened)
    assert not reopened.log.commit_exists(3)


def test_commits_a_stopped_purge_left_unbuildable_expire_at_the_next_reclamation(tmp_path: Path) -> None:
    """A PURGE that could not delete one commit stops its log step there: the commits after it stay, but
    their checkpoints are gone, so those versions cannot be built. The next reclamation (whatever the
    retention) counts the table's oldest version from what can be built, and finishes the PURGE's work."""
    from datetime import timedelta

    from maintd.reclaim import purge_table
    from maintd.storage import LocalStorage
    from maintd.storage.faulty import Fault, FaultPlan

    table = Table.create(str(tmp_path / "t"), "id:int64!,name:string", primary_key="id", buckets=1,
                         properties={"acid.data.retain.hours": 24, "log.checkpoint.interval": 3})
    for i in range(8):
        table.upsert(pa.table({"id": [i], "name": [f"n{i}"]}))
        if i % 3 == 2:
            table.overwrite(table.read())
    expected = sorted(table.read().to_pylist(), key=lambda r: r["id"])
    plan = FaultPlan([Fault("fail", op="delete", path=commit_path(2))])

    stopped = purge_table(Table(plan.wrap(LocalStorage(table.uri))), user="test")

    assert not stopped.complete and table.log.commit_exists(2) and table.log.commit_exists(5)
    report = reclaim_table(Table.open(table.uri), orphan_grace=timedelta(hours=1))
    assert report.complete and report.oldest_retained_version == stopped.purge_version
    assert [v for v in range(table.version + 1) if table.log.commit_exists(v)] == [stopped.purge_version]
    live = set(Table.open(table.uri).snapshot().files)
    assert {p.relative_to(tmp_path / "t").as_posix() for p in (tmp_path / "t").rglob("*.parquet")
            if "_log" not in p.parts} == live
    assert sorted(Table.open(table.uri).read().to_pylist(), key=lambda r: r["id"]) == expected


def test_a_late_checkpoint_of_an_expired_version_does_not_make_it_readable_again(tmp_path: Path) -> None:
    """A writer checkpoints a version after committing it; delayed, that checkpoint can land after reclamation
    expired the version and deleted its files. The writer removes it; one that outlived its writer leaves the
    version expired all the same (it reads as expired, not as missing files)."""
    from maintd.errors import VersionNotFoundError
    from maintd.table.log.checkpoint import encode_checkpoint

    table = Table.create(str(tmp_path / "t"), "id:int64!,v:int64", primary_key="id",
                         properties={"acid.data.retain.hours": 0, "log.checkpoint.interval": 100})
    table.upsert(pa.table({"id": [1, 2], "v": [1, 1]}))
    table.upsert(pa.table({"id": [1], "v": [2]}))
    old = table.snapshot(1)
    table.overwrite(pa.table({"id": [3], "v": [3]}))  # version 3 no longer reads version 1's file
    report = reclaim_table(Table.open(table.uri))
    assert report.oldest_retained_version == 3 and report.data_files_deleted >= 1
    table.log.write_checkpoint(old)  # the writer's delayed checkpoint of version 1
    assert not table.log.checkpoint_exists(1), "the writer finds its version expired and removes the checkpoint"
    (tmp_path / "t" / checkpoint_path(1)).write_bytes(encode_checkpoint(old))  # one that outlived its writer
    with pytest.raises(VersionNotFoundError, match="expired") as err:
        Table.open(table.uri).snapshot(1)
    assert err.value.oldest_retained == 3
    assert Table.open(table.uri).read().to_pylist() == [{"id": 3, "v": 3}]


def test_the_reclaimed_marks_grow_independently_when_commit_clocks_disagree(tmp_path: Path) -> None:
    """Commit timestamps come from the writers' clocks, so a newer version may carry an older timestamp. A
    reclamation keeping such a version must still advance the version mark (and never lower the time mark)."""
    log = TableLog(Table.create(str(tmp_path / "t"), "id:int64!", primary_key="id").storage)
    log.advance_reclaimed_watermark(5, 1_000)
    log.advance_reclaimed_watermark(7, 900)  # newer version, older clock
    assert (log.reclaimed_version(), log.reclaimed_watermark()) == (7, 1_000)
    log.advance_reclaimed_watermark(6, 1_200)  # an older version never lowers the version mark
    assert (log.reclaimed_version(), log.reclaimed_watermark()) == (7, 1_200)



@pytest.mark.parametrize("mark", ["written", "lost"])
def test_a_commit_published_into_purged_history_beside_a_late_checkpoint_never_sets_the_retained_time(
        tmp_path: Path, mark: str) -> None:
    """After a PURGE, a stale writer publishes its commit at a version the PURGE deleted, and dies before taking it
    back; the real commit of that version has a late interval checkpoint, written after the PURGE. Commit and
    checkpoint make the version look buildable, and the stale commit's time is later than the commits after it.
    Reclamation keeps to the PURGE's mark, and never takes that time for the cutoff, also when the PURGE stopped
    before it wrote its mark ("lost"): every retained version reads."""
    from maintd.reclaim import purge_table
    from maintd.table.log.actions import CommitInfo
    from maintd.table.log.checkpoint import encode_checkpoint
    from maintd.table.log.commitfile import encode_commit
    from maintd.table.log.tablelog import RECLAIMED

    table = Table.create(str(tmp_path / "t"), "id:int64!,name:string", primary_key="id", buckets=1,
                         properties={"acid.data.retain.hours": 1, "log.checkpoint.interval": 2})
    for i in range(7):
        table.upsert(pa.table({"id": [i], "name": [f"n{i}"]}))
    assert table.version == 7
    real_7 = table.snapshot()
    purge = purge_table(Table.open(table.uri), user="test")
    assert purge.complete and not table.log.commit_exists(7)
    purged = Table.open(table.uri)
    kept = sorted(purged.read().to_pylist(), key=lambda r: r["id"])
    after = purged.overwrite(pa.table({"id": [99], "name": ["new"]}))  # removes every file the PURGE version reads
    late = purged.log.read_commit(after)
    assert late is not None
    stale_ts = next(a.timestamp for a in late if isinstance(a, CommitInfo)) + 5
    stale = CommitInfo(operation="UPSERT", timestamp=stale_ts, txn_id="published-into-purged-history")
    (tmp_path / "t" / commit_path(7)).write_bytes(encode_commit([stale], version=7))
    (tmp_path / "t" / checkpoint_path(7)).write_bytes(encode_checkpoint(real_7))
    if mark == "lost":
        (tmp_path / "t" / RECLAIMED).unlink()

    report = reclaim_table(Table.open(table.uri))

    assert report.complete and report.data_files_deleted == 0, "the PURGE version's files are removed only after it"
    if mark == "written":
        assert report.oldest_retained_version == purge.purge_version
        assert not table.log.commit_exists(7) and not table.log.checkpoint_exists(7), "the stray log files are gone"
    again = Table.open(table.uri)
    assert sorted(again.read(version=purge.purge_version).to_pylist(), key=lambda r: r["id"]) == kept
    assert again.read().to_pylist() == [{"id": 99, "name": "new"}]
