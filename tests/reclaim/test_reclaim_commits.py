"""Transactions whose next version is reclaimed while they run: they land later, or conflict, never vanish."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from maintd import ConcurrentDeleteDeleteError, MetadataChangedError, Table
from maintd.reclaim import reclaim_table
from maintd.table.log import commit_path
from maintd.table.writer import prepare_changes, split_and_write


def table_with_history(root: Path) -> Table:
    table = Table.create(str(root), "id:int64!,name:string", primary_key="id", buckets=1,
                         properties={"acid.data.retain.hours": 0})
    for i in range(3):
        table.upsert(pa.table({"id": [i], "name": [f"n{i}"]}))
    return table


def pending_upsert(table: Table, rows: pa.Table):  # type: ignore[no-untyped-def]
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
    report = reclaim_table(other)
    assert report.oldest_retained_version == other.version


def test_a_writer_whose_next_version_was_reclaimed_lands_after_the_latest(tmp_path: Path) -> None:
    table = table_with_history(tmp_path / "t")
    txn = pending_upsert(table, pa.table({"id": [42], "name": ["late"]}))
    read_version = txn.read_snapshot.version
    advance_and_reclaim(table, commits=3)
    assert not (tmp_path / "t" / commit_path(read_version + 1)).exists(), "the version it will try was reclaimed"

    version = txn.commit()

    assert version == read_version + 4
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
    actions = table.log.read_commit(version)
    assert actions is not None
    advance_and_reclaim(table, commits=2)
    assert not table.log.commit_exists(version - 1) and not table.log.commit_exists(version)

    assert table.log.landed(version, actions)
