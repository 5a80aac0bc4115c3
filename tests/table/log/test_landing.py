"""Did a commit land? Landed, not landed or unknown, settled from the log; files deleted only when not landed.

The storages here fail the way real ones do (:mod:`maintd.storage.faulty`): a publish that applies and loses
its answer, one that is refused with an error, and reads that keep failing afterwards.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pytest

from maintd import CommitStateUnknownError, RetryPolicy, Table
from maintd.reclaim import reclaim_table
from maintd.storage import LocalStorage
from maintd.storage.faulty import Fault, FaultPlan

from ..table_helpers import LostAnswerStorage, data_files_on_disk, log_versions

DATA = pa.table({"id": [2, 3], "name": ["b", "c"]})
QUICK = RetryPolicy(max_attempts=4, base_delay=0.001, max_delay=0.005, total_timeout=30)


def _create(root: Path) -> Table:
    table = Table.create(str(root), "id:int64!,name:string", primary_key="id", buckets=2)
    table.upsert(pa.table({"id": [1], "name": ["a"]}))
    return table


def _ids(root: Path) -> list[int]:
    return sorted(r["id"] for r in Table.open(str(root)).read().to_pylist())


def test_a_commit_whose_answer_is_lost_on_its_last_attempt_is_acknowledged_and_keeps_its_files(
        tmp_path: Path) -> None:
    """The last attempt the policy allows applies but reports "exists" (an object store retrying a conditional
    put whose first request applied): the commit is in the log, so it is a success, and its files stay."""
    _create(tmp_path / "t")
    writer = Table(LostAnswerStorage(str(tmp_path / "t"), lose=1), retry=RetryPolicy(max_attempts=1))

    assert writer.upsert(DATA) == 2
    assert _ids(tmp_path / "t") == [1, 2, 3]
    assert data_files_on_disk(tmp_path / "t") == set(Table.open(str(tmp_path / "t")).snapshot().files)


@pytest.mark.parametrize("kind", ["fail", "fail_after"])
def test_a_publish_that_raised_is_settled_by_reading_the_log_and_lands_once(tmp_path: Path, kind: str) -> None:
    """Refused with an error (``fail``): published again. Applied, then the answer lost (``fail_after``):
    found in the log. Either way one commit, acknowledged."""
    _create(tmp_path / "t")
    plan = FaultPlan([Fault(kind, op="put_if_absent", path="_log/*.json", times=1)])  # type: ignore[arg-type]
    writer = Table(plan.wrap(LocalStorage(str(tmp_path / "t"))), retry=QUICK)

    assert writer.upsert(DATA) == 2
    assert [f.kind for f in plan.fired] == [kind]
    assert log_versions(tmp_path / "t") == [0, 1, 2] and _ids(tmp_path / "t") == [1, 2, 3]


@pytest.mark.parametrize("kind", ["fail", "fail_after"])
def test_when_whether_a_commit_landed_cannot_be_known_the_error_says_so_and_nothing_is_deleted(
        tmp_path: Path, kind: str) -> None:
    """The publish raises, then every read of a commit fails until the retry policy is spent: the writer
    cannot know, so it raises CommitStateUnknownError (naming the version and the transaction id) and
    deletes none of its files. What the log then shows decides: landed, its files are the table's; not
    landed, they are orphans that reclamation deletes after the grace."""
    root = tmp_path / "t"
    _create(root)
    plan = FaultPlan()
    writer = Table(plan.wrap(LocalStorage(str(root))), retry=QUICK)
    writer.snapshot()  # loaded before the storage goes bad
    before = data_files_on_disk(root)
    plan.add(Fault(kind, op="put_if_absent", path="_log/*.json", times=1),  # type: ignore[arg-type]
             Fault("fail", op="read", path="_log/*.json"))

    with pytest.raises(CommitStateUnknownError, match="cannot be known") as caught:
        writer.upsert(DATA)

    assert caught.value.version == 2 and caught.value.txn_id in str(caught.value)
    written = data_files_on_disk(root) - before
    assert len(written) == 2, "the files of a commit that may have landed are kept"
    table = Table.open(str(root))
    if kind == "fail_after":
        assert table.version == 2 and table.log.read_commit_txn(2) == caught.value.txn_id
        assert _ids(root) == [1, 2, 3] and written <= set(table.snapshot().files)
    else:
        assert table.version == 1 and _ids(root) == [1]
        report = reclaim_table(table, orphan_grace=timedelta(0), force_short_grace=True)
        assert report.orphan_files_deleted == 2 and data_files_on_disk(root) == before


def test_creating_a_table_whose_publish_raised_after_it_applied_succeeds(tmp_path: Path) -> None:
    plan = FaultPlan([Fault("fail_after", op="put_if_absent", path="_log/*.json", times=1)])
    plan.install()
    try:
        table = Table.create(str(tmp_path / "t"), "id:int64!,name:string", primary_key="id")
    finally:
        plan.uninstall()
    assert plan.fired and table.version == 0
    assert type(Table.open(str(tmp_path / "t")).storage) is LocalStorage, "uninstalled: plain local storage again"
