"""Committing rewrites: one data_change=false transaction, conflicts, cleanup, and the read invariant."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from maintd import RetryPolicy, Table
from maintd.execution import ExecutionOptions, commit_rewrites, execute
from maintd.storage import LocalStorage
from maintd.table.actions import AddFile, RemoveFile

from .helpers import batch, make_table, plan_all, sorted_read


def _reads(table, versions):  # type: ignore[no-untyped-def]
    return {v: sorted_read(table, v) for v in versions}


def test_maintenance_changes_no_read_of_any_retained_version_nor_any_changes(tmp_path: Path) -> None:
    table, model = make_table(tmp_path, commits=12)
    v0 = table.version
    versions = range(1, v0 + 1)
    before = _reads(table, versions)
    changes = {(a, b): table.changes(a, b) for a in (0, 3, 7) for b in (v0, 9)}
    plan = plan_all(table, "cluster", level=1)
    v1 = commit_rewrites(table, plan, execute(plan, table, None)).version
    plan = plan_all(table, "compact")
    v2 = commit_rewrites(table, plan, execute(plan, table, None, ExecutionOptions(task_memory_bytes=20_000))).version
    assert (v1, v2) == (v0 + 1, v0 + 2)
    for v in versions:
        assert sorted_read(table, v).equals(before[v]), f"read({v}) changed"
    assert sorted_read(table, v1).equals(before[v0]) and sorted_read(table, v2).equals(model.table())
    for (a, b), expected in changes.items():
        assert table.changes(a, b).equals(expected)
    assert table.changes(v0, v2).num_rows == 0
    commits = table.log.read_commit(v2) or []
    assert all(not a.data_change for a in commits if isinstance(a, AddFile | RemoveFile))
    assert table.history(1)[0].metrics["bytes_read"] > 0


def test_a_writer_committing_between_plan_and_commit_keeps_its_rows_and_wins(tmp_path: Path) -> None:
    table, model = make_table(tmp_path, commits=10)
    plan = plan_all(table, "compact")
    results = execute(plan, table, None)
    rng = np.random.default_rng(99)
    for _ in range(3):  # commits in (read version, maintenance commit): newer than every compacted row
        b = batch(rng, 200, 600)
        table.write_changes(b, "op")
        model.apply(b)
    outcome = commit_rewrites(table, plan, results)
    assert outcome.version == plan.read_version + 4 and not outcome.dropped
    assert sorted_read(table).equals(model.table())
    levels = {(f.kind, f.level) for f in table.snapshot().files.values()}
    assert levels == {("base", None), ("delta", 0)}


def test_tasks_whose_inputs_were_removed_concurrently_are_dropped_and_the_others_commit(tmp_path: Path) -> None:
    table, model = make_table(tmp_path, commits=10)
    plan = plan_all(table, "compact")
    results = execute(plan, table, None)
    rival = plan_all(table, "cluster", level=1)  # another maintenance run rewrites bucket 0 first
    first = rival.model_copy(update={"tasks": rival.tasks[:1]})
    assert commit_rewrites(table, first, execute(first, table, None)).version is not None
    outcome = commit_rewrites(table, plan, results)
    victim = plan.tasks[0].task_id
    assert outcome.dropped == [victim] and outcome.conflicts == 1
    assert sorted(outcome.committed) == sorted(t.task_id for t in plan.tasks[1:])
    dropped = next(r for r in results if r.task_id == victim)
    assert dropped.adds and not any(table.storage.exists(a.path) for a in dropped.adds)
    assert sorted_read(table).equals(model.table())


def test_a_concurrent_metadata_change_aborts_the_run_and_deletes_its_outputs(tmp_path: Path) -> None:
    table, model = make_table(tmp_path, commits=5)
    plan = plan_all(table, "compact")
    results = execute(plan, table, None)
    table.set_properties({"log.checkpoint.interval": "50"})
    outcome = commit_rewrites(table, plan, results)
    assert outcome.version is None and "MetadataChangedError" in (outcome.error or "")
    assert all(not table.storage.exists(a.path) for r in results for a in r.adds)
    assert sorted_read(table).equals(model.table())


def test_a_commit_whose_outcome_cannot_be_known_leaves_outputs_for_orphan_cleanup(tmp_path: Path,
                                                                                  monkeypatch: pytest.MonkeyPatch
                                                                                  ) -> None:
    table, _ = make_table(tmp_path, commits=5)
    table = Table.open(table.uri, retry=RetryPolicy(max_attempts=3, base_delay=0.001, max_delay=0.005))
    plan = plan_all(table, "compact")
    results = execute(plan, table, None)

    def broken(version, actions, **kwargs):  # type: ignore[no-untyped-def]
        raise OSError("connection reset while publishing")

    monkeypatch.setattr(table.log, "try_commit", broken)
    outcome = commit_rewrites(table, plan, results)
    assert outcome.version is None and outcome.error_type == "CommitStateUnknownError"
    assert sorted(outcome.outputs_left) == sorted(a.path for r in results for a in r.adds)
    assert all(table.storage.exists(p) for p in outcome.outputs_left)


class _LostAnswer(LocalStorage):
    """Publishes the first commit but answers "it exists already": the answer to an applied put got lost."""

    lost = False

    def put_if_absent(self, path: str, data: bytes) -> bool:
        created = super().put_if_absent(path, data)
        if created and path.endswith(".json") and not self.lost:
            self.lost = True
            return False
        return created


def test_a_maintenance_commit_that_landed_keeps_its_outputs_though_its_last_attempt_lost_the_answer(
        tmp_path: Path) -> None:
    """The only attempt allowed lands but is answered "exists": the compaction is in the log, so its new
    BaseFiles must stay (deleting them would lose every bucket it compacted)."""
    table, model = make_table(tmp_path, commits=5)
    lossy = Table(_LostAnswer(table.uri), retry=RetryPolicy(max_attempts=1))
    plan = plan_all(lossy, "compact")
    results = execute(plan, lossy, None)

    outcome = commit_rewrites(lossy, plan, results)

    assert outcome.version == plan.read_version + 1 and not outcome.dropped
    assert all(table.storage.exists(a.path) for r in results for a in r.adds)
    assert sorted_read(Table.open(table.uri)).equals(model.table())
