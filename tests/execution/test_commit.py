"""Committing rewrites: one data_change=false transaction, conflicts, cleanup, and the read invariant."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from maintd import RetryPolicy, Table
from maintd.errors import (
    CommitRetriesExhaustedError,
    ConcurrentDeleteDeleteError,
    InvalidInputError,
    MetadataChangedError,
)
from maintd.execution import ExecutionOptions, IncrementalCommitter, PlanDoc, commit_rewrites, execute
from maintd.execution.specs import TaskResult
from maintd.storage import LocalStorage
from maintd.table.log.actions import AddFile, RemoveFile

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


# --- The commit step on a stand-in table: what each transaction gets, and the fate of every task. ---

class _Storage:
    def __init__(self) -> None:
        self.deleted: list[str] = []

    def delete(self, path: str) -> None:
        self.deleted.append(path)


class _Txn:
    def __init__(self, table: _FakeTable, operation: str, read: object) -> None:
        self.table, self.operation, self.read = table, operation, read
        self.removed: list[tuple[str, bool]] = []
        self.added: list[str] = []
        self.attempts = 0

    def remove(self, path: str, data_change: bool = True) -> None:
        self.removed.append((path, data_change))

    def add(self, a: AddFile) -> None:
        self.added.append(a.path)

    def commit(self, metrics: dict, parameters: dict) -> int:  # type: ignore[type-arg]
        self.metrics, self.parameters = metrics, parameters
        step = self.table.script.pop(0) if self.table.script else None
        self.attempts = self.table.attempts.pop(0) if self.table.attempts else 1
        if isinstance(step, Exception):
            raise step
        self.table.version += 1
        return self.table.version


class _FakeTable:
    """Records every transaction; ``script`` holds what each commit does (an exception raised, or None: it lands)."""

    uri = "mem://t"

    def __init__(self, *script: Exception | None, attempts: tuple[int, ...] = ()) -> None:
        self.script = list(script)
        self.attempts = list(attempts)
        self.storage = _Storage()
        self.txns: list[_Txn] = []
        self.version = 10
        self.snapshots: list[int] = []

    def snapshot(self, version: int) -> str:
        self.snapshots.append(version)
        return f"snapshot@{version}"

    def new_transaction(self, operation: str, read_snapshot: object) -> _Txn:
        txn = _Txn(self, operation, read_snapshot)
        self.txns.append(txn)
        return txn


def _add(path: str) -> AddFile:
    return AddFile(path=path, bucket=0, kind="base", level=None, rows=1, bytes=1, min_version=0, max_version=0,
                   min_commit_time=0, max_commit_time=0)


def _result(task_id: str, *, ok: bool = True, kind: str = "compact", inputs: int = 2, adds: int = 1,
            n: int = 1) -> TaskResult:
    return TaskResult(task_id=task_id, kind=kind, ok=ok,  # type: ignore[arg-type]
                      inputs=tuple(f"bucket-0/{task_id}-in{i}.parquet" for i in range(inputs)),
                      adds=tuple(_add(f"bucket-0/{task_id}-out{i}.parquet") for i in range(adds)),
                      bytes_read=10 * n, bytes_written=20 * n, rows_read=3 * n, rows_written=2 * n,
                      seconds=0.1234 * n)


PLAN = PlanDoc(table_uri="mem://t", read_version=7, policy_name="nightly", tasks=())


def _outputs(*results: TaskResult) -> list[str]:
    return [a.path for r in results for a in r.adds]


def test_a_group_removes_its_inputs_without_a_data_change_adds_its_outputs_and_records_its_figures() -> None:
    table = _FakeTable()
    a, b, c = _result("a", kind="compact"), _result("b", kind="cluster", inputs=1, adds=2, n=2), _result("c")
    outcome = commit_rewrites(table, PLAN, [a, b, c])  # type: ignore[arg-type]
    (txn,) = table.txns
    assert table.snapshots == [7] and txn.read == "snapshot@7" and txn.operation == "OPTIMIZE"
    assert txn.removed == [(p, False) for r in (a, b, c) for p in r.inputs]
    assert txn.added == _outputs(a, b, c)
    assert txn.metrics == {"tasks": 3, "files_removed": 5, "files_added": 4, "bytes_read": 40, "bytes_written": 80,
                           "rows_read": 12, "rows_written": 8, "task_seconds": 0.494}
    assert txn.parameters == {"policy": "nightly", "kinds": ["cluster", "compact"], "plan_read_version": 7}
    assert (outcome.version, outcome.versions, outcome.committed) == (11, [11], ["a", "b", "c"])
    assert not (outcome.dropped or outcome.failed or outcome.conflicts or outcome.error or outcome.abandoned)
    assert table.storage.deleted == [] and outcome.retries == 0


def test_failed_tasks_are_recorded_and_their_outputs_deleted_and_never_part_of_the_commit() -> None:
    table = _FakeTable()
    ok, bad1, bad2 = _result("ok"), _result("bad1", ok=False, adds=2), _result("bad2", ok=False)
    outcome = commit_rewrites(table, PLAN, [bad1, ok, bad2])  # type: ignore[arg-type]
    assert outcome.failed == ["bad1", "bad2"] and outcome.committed == ["ok"]
    assert table.storage.deleted == _outputs(bad1, bad2)
    assert table.txns[0].added == _outputs(ok) and table.txns[0].metrics["tasks"] == 1


def test_a_delete_conflict_drops_the_tasks_it_names_and_commits_the_others_at_the_same_read_version() -> None:
    a, b, c = _result("a"), _result("b"), _result("c")
    clash = ConcurrentDeleteDeleteError("b gone", paths=(b.inputs[1], "bucket-0/other.parquet"))
    table = _FakeTable(clash, None, attempts=(3, 2))
    outcome = commit_rewrites(table, PLAN, [a, b, c])  # type: ignore[arg-type]
    assert [t.read for t in table.txns] == ["snapshot@7", "snapshot@7"]
    assert table.txns[1].added == _outputs(a, c) and table.txns[1].metrics["tasks"] == 2
    assert outcome.dropped == ["b"] and outcome.committed == ["a", "c"] and outcome.versions == [11]
    assert outcome.conflicts == 1 and outcome.conflict_types == ["ConcurrentDeleteDeleteError"]
    assert table.storage.deleted == _outputs(b) and outcome.retries == 3 and not outcome.abandoned
    assert outcome.error is None


def test_a_delete_conflict_naming_none_of_the_inputs_drops_every_task_of_the_group() -> None:
    a, b = _result("a"), _result("b")
    table = _FakeTable(ConcurrentDeleteDeleteError("gone"), None, attempts=(0,))
    outcome = commit_rewrites(table, PLAN, [a, b])  # type: ignore[arg-type]
    assert len(table.txns) == 1 and outcome.dropped == ["a", "b"] and outcome.committed == []
    assert outcome.version is None and outcome.versions == [] and outcome.retries == 0
    assert table.storage.deleted == _outputs(a, b) and outcome.conflicts == 1


@pytest.mark.parametrize(("error", "conflict"), [
    (MetadataChangedError("schema changed"), True),
    (CommitRetriesExhaustedError("lost 5 races"), False),
    (InvalidInputError("bad input"), False),
])
def test_a_commit_that_certainly_failed_abandons_the_run_and_deletes_the_groups_outputs(
        error: Exception, conflict: bool) -> None:
    a, b = _result("a"), _result("b")
    table = _FakeTable(error, attempts=(2,))
    outcome = commit_rewrites(table, PLAN, [a, b])  # type: ignore[arg-type]
    name = type(error).__name__
    assert outcome.error == f"{name}: {error}" and outcome.error_type == name and outcome.abandoned
    assert outcome.conflicts == int(conflict) and outcome.conflict_types == ([name] if conflict else [])
    assert outcome.dropped == ["a", "b"] and table.storage.deleted == _outputs(a, b) and len(table.txns) == 1
    assert outcome.outputs_left == [] and outcome.version is None and outcome.retries == 1


def test_a_commit_failing_otherwise_keeps_the_groups_outputs_for_orphan_cleanup() -> None:
    a, b = _result("a", adds=2), _result("b")
    table = _FakeTable(OSError("reset"), attempts=(4,))
    outcome = commit_rewrites(table, PLAN, [a, b])  # type: ignore[arg-type]
    assert outcome.error == "OSError: reset" and outcome.error_type == "OSError" and outcome.abandoned
    assert outcome.dropped == ["a", "b"] and outcome.outputs_left == _outputs(a, b)
    assert table.storage.deleted == [] and outcome.conflicts == 0 and outcome.retries == 3
    assert outcome.to_dict()["outputs_left"] == _outputs(a, b) and outcome.to_dict()["abandoned"] is True


def _committer(table: _FakeTable, now: list[float], **kwargs: object) -> IncrementalCommitter:
    return IncrementalCommitter(table, PLAN, clock=lambda: now[0], **kwargs)  # type: ignore[arg-type]


def test_a_group_is_due_once_it_holds_max_tasks_or_its_first_task_has_waited_the_interval() -> None:
    table, now = _FakeTable(), [100.0]
    c = _committer(table, now, max_tasks=3, interval_seconds=10.0)
    assert table.snapshots == [7] and c.seconds_to_due() is None and not c.due()
    c.add(_result("a"))
    now[0] = 104.0
    c.add(_result("b"))  # the wait counts from the first task
    assert c.seconds_to_due() == 6.0 and not c.due() and not table.txns
    now[0] = 110.0
    assert c.seconds_to_due() == 0.0 and c.due()  # due at exactly the interval
    c.add(_result("c"))
    assert [t.added for t in table.txns] == [_outputs(_result("a"), _result("b"), _result("c"))]
    assert c.groups == 1 and c.seconds_to_due() is None and table.txns[0].read == "snapshot@7"
    now[0] = 200.0
    c.add(_result("d"))
    c.add(_result("e"))
    assert c.seconds_to_due() == 10.0
    c.add(_result("f"))  # three tasks: due at once
    assert c.groups == 2 and c.finish().committed == ["a", "b", "c", "d", "e", "f"] and c.groups == 2


def test_the_group_limits_default_to_64_tasks_and_30_seconds_and_are_bounded_below() -> None:
    table, now = _FakeTable(), [0.0]
    c = _committer(table, now)
    for i in range(63):
        c.add(_result(f"t{i}"))
    assert c.seconds_to_due() == 30.0 and not table.txns
    c.add(_result("t63"))
    assert len(table.txns) == 1 and table.txns[0].metrics["tasks"] == 64
    zero = _committer(_FakeTable(), now, max_tasks=0, interval_seconds=100.0)
    zero.add(_result("a"))
    assert zero.groups == 1 and zero.outcome.committed == ["a"]
    late = _committer(_FakeTable(), now, max_tasks=5, interval_seconds=-5.0)
    late.add(_result("a"))
    assert late.groups == 1 and late.interval == 0.0


def test_a_failed_task_is_settled_at_once_and_starts_no_group() -> None:
    table, now = _FakeTable(), [0.0]
    c = _committer(table, now, max_tasks=2, interval_seconds=10.0)
    bad = _result("bad", ok=False)
    c.add(bad)
    assert c.outcome.failed == ["bad"] and table.storage.deleted == _outputs(bad) and c.seconds_to_due() is None
    now[0] = 5.0
    c.add(_result("a"))
    assert c.seconds_to_due() == 10.0
    c.flush()
    c.flush()  # nothing pending: no commit
    assert len(table.txns) == 1 and c.groups == 1


def test_a_group_stopped_by_before_commit_is_left_for_orphan_cleanup_and_nothing_more_is_committed() -> None:
    table, now = _FakeTable(), [0.0]

    def lost_lease() -> None:
        raise RuntimeError("lease lost")

    c = _committer(table, now, max_tasks=2, before_commit=lost_lease)
    a, b, late1, late2 = _result("a"), _result("b", adds=2), _result("late1"), _result("late2")
    c.add(a)
    assert not c.abandoned
    c.add(b)
    assert c.abandoned and c.outcome.error == "RuntimeError: lease lost" and c.outcome.error_type == "RuntimeError"
    assert c.outcome.dropped == ["a", "b"] and c.outcome.outputs_left == _outputs(a, b)
    assert not table.txns and table.storage.deleted == [] and c.groups == 0
    c.add(late1)  # never part of a commit attempt: deleted
    c.add(late2)
    assert c.outcome.dropped == ["a", "b", "late1", "late2"] and table.storage.deleted == _outputs(late1, late2)
    assert c.finish() is c.outcome and not table.txns


def test_a_group_queued_before_the_run_was_abandoned_is_deleted_at_its_flush() -> None:
    table, now = _FakeTable(MetadataChangedError("changed")), [0.0]
    c = _committer(table, now, max_tasks=2, interval_seconds=100.0)
    c.add(_result("a"))
    c.add(_result("b"))  # committed: fails for good
    assert c.abandoned and table.storage.deleted == _outputs(_result("a"), _result("b"))
    c._pending.append(_result("c"))
    c._since = 0.0
    c.flush()
    assert c.outcome.dropped == ["a", "b", "c"] and len(table.txns) == 1 and c.groups == 1
    assert table.storage.deleted == _outputs(_result("a"), _result("b"), _result("c"))


def test_each_fate_of_a_group_is_logged_with_the_table_the_task_count_and_the_error() -> None:
    from loguru import logger

    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(m.record["level"].name + " " + m.record["message"]), level="INFO")
    try:
        a, b = _result("a"), _result("b", adds=2)
        commit_rewrites(_FakeTable(ConcurrentDeleteDeleteError("gone"), None), PLAN, [a])  # type: ignore[arg-type]
        commit_rewrites(_FakeTable(MetadataChangedError("changed")), PLAN, [a])  # type: ignore[arg-type]
        commit_rewrites(_FakeTable(OSError("reset")), PLAN, [a, b])  # type: ignore[arg-type]

        def lost_lease() -> None:
            raise RuntimeError("lease lost")

        c = _committer(_FakeTable(), [0.0], max_tasks=2, before_commit=lost_lease)
        c.add(a)
        c.add(b)
    finally:
        logger.remove(sink)
    assert lines == [
        "INFO table mem://t: 1 task(s) dropped, their inputs were removed concurrently: gone",
        "WARNING table mem://t: maintenance commit abandoned: changed",
        "ERROR table mem://t: maintenance commit failed, outcome unknown; 3 output file(s) left for orphan "
        "cleanup: reset",
        "WARNING table mem://t: 2 finished task(s) not committed: lease lost",
    ]


def test_a_group_is_not_due_while_less_than_a_second_of_its_interval_is_left() -> None:
    table, now = _FakeTable(), [0.0]
    c = _committer(table, now, max_tasks=5, interval_seconds=10.0)
    c.add(_result("a"))
    now[0] = 9.5
    assert c.seconds_to_due() == 0.5 and not c.due()
    c.add(_result("b"))
    assert not table.txns


def test_conflicts_and_dropped_tasks_add_up_over_the_retries_and_groups_of_a_run() -> None:
    a, b, c, d = _result("a"), _result("b"), _result("c"), _result("d")
    table = _FakeTable(ConcurrentDeleteDeleteError("a gone", paths=a.inputs),
                       ConcurrentDeleteDeleteError("b gone", paths=b.inputs), None)
    outcome = commit_rewrites(table, PLAN, [a, b, c])  # type: ignore[arg-type]
    assert outcome.conflicts == 2 and outcome.dropped == ["a", "b"] and outcome.committed == ["c"]
    assert outcome.conflict_types == ["ConcurrentDeleteDeleteError"] * 2
    table = _FakeTable(ConcurrentDeleteDeleteError("a gone", paths=a.inputs), MetadataChangedError("changed"))
    outcome = commit_rewrites(table, PLAN, [a, b])  # type: ignore[arg-type]
    assert outcome.conflicts == 2 and outcome.conflict_types == ["ConcurrentDeleteDeleteError", "MetadataChangedError"]
    table = _FakeTable(ConcurrentDeleteDeleteError("a gone", paths=a.inputs), OSError("reset"))
    outcome = commit_rewrites(table, PLAN, [a, b])  # type: ignore[arg-type]
    assert outcome.dropped == ["a", "b"] and outcome.outputs_left == _outputs(b)

    def lost_lease() -> None:
        if table.txns:
            raise RuntimeError("lease lost")

    table = _FakeTable(ConcurrentDeleteDeleteError("a gone", paths=a.inputs))
    committer = _committer(table, [0.0], max_tasks=2, before_commit=lost_lease)
    committer.add(a)
    committer.add(b)  # a dropped, b committed
    committer.add(c)
    committer.add(d)  # stopped before its commit
    assert committer.outcome.dropped == ["a", "c", "d"] and committer.outcome.committed == ["b"]


def test_every_failed_task_of_an_incremental_run_is_recorded() -> None:
    c = _committer(_FakeTable(), [0.0], max_tasks=5)
    c.add(_result("bad1", ok=False))
    c.add(_result("bad2", ok=False))
    assert c.finish().failed == ["bad1", "bad2"]
