"""Incremental commits: finished tasks land in groups bounded by count and time; a failure costs only itself."""

from __future__ import annotations

from pathlib import Path

import pytest

from maintd.execution import ExecutionOptions, IncrementalCommitter, commit_rewrites, execute, run_plan
from maintd.execution.runner import Runner

from .helpers import make_table, plan_all, sorted_read

ONE_PER_SPARK_TASK = {"task_input_bytes": 1}
"""Every unit its own Spark task (and every compaction split into key ranges), so results arrive one by one."""


def _stray(table) -> set[str]:  # type: ignore[no-untyped-def]
    """Data files on storage that no retained version references (what orphan cleanup would find)."""
    snap = table.snapshot()
    on_disk = {f.path for f in table.storage.walk() if f.path.startswith("bucket-")}
    return on_disk - set(snap.files) - set(snap.tombstones)


def test_finished_tasks_are_committed_in_groups_of_the_configured_count(tmp_path: Path) -> None:
    table, model = make_table(tmp_path, commits=8, buckets=5)
    plan = plan_all(table, "compact")
    opts = ExecutionOptions(commit_max_tasks=2, commit_interval_seconds=3600, **ONE_PER_SPARK_TASK)
    report = run_plan(plan, table, None, opts, commit=True)
    assert report.outcome is not None and sorted(report.outcome.committed) == sorted(t.task_id for t in plan.tasks)
    assert report.outcome.versions == [plan.read_version + 1, plan.read_version + 2, plan.read_version + 3]
    assert [c.metrics["tasks"] for c in reversed(table.history(3))] == [2, 2, 1]
    assert sorted_read(table).equals(model.table()) and not _stray(table)


def test_a_group_is_committed_once_its_first_task_has_waited_the_interval(tmp_path: Path) -> None:
    table, _ = make_table(tmp_path, commits=4, buckets=3)
    plan = plan_all(table, "compact")
    results = execute(plan, table)
    now = [100.0]
    committer = IncrementalCommitter(table, plan, max_tasks=10, interval_seconds=30, clock=lambda: now[0])
    committer.add(results[0])
    now[0] += 20
    committer.add(results[1])
    assert table.version == plan.read_version and committer.seconds_to_due() == pytest.approx(10)
    now[0] += 10
    assert committer.due()
    committer.flush()
    assert table.version == plan.read_version + 1 and committer.seconds_to_due() is None
    committer.add(results[2])
    outcome = committer.finish()
    assert outcome.versions == [plan.read_version + 1, plan.read_version + 2] and len(outcome.committed) == 3


def test_a_task_whose_inputs_were_removed_during_the_run_loses_only_itself(tmp_path: Path) -> None:
    table, model = make_table(tmp_path, commits=8, buckets=4)
    plan = plan_all(table, "compact")
    victim = plan.tasks[0]
    rival = plan_all(table, "cluster", level=1)
    rival = rival.model_copy(update={"tasks": rival.tasks[:1]})
    calls = []

    def rival_lands_first() -> None:
        if not calls:  # another maintenance run rewrites the victim's bucket just before the first group commits
            assert commit_rewrites(table, rival, execute(rival, table)).committed
        calls.append(1)

    opts = ExecutionOptions(commit_max_tasks=1, commit_interval_seconds=0, **ONE_PER_SPARK_TASK)
    report = run_plan(plan, table, None, opts, commit=True, before_commit=rival_lands_first)
    outcome = report.outcome
    assert outcome is not None and outcome.dropped == [victim.task_id] and outcome.conflicts == 1
    assert sorted(outcome.committed) == sorted(t.task_id for t in plan.tasks[1:]) and not outcome.abandoned
    assert sorted_read(table).equals(model.table()) and not _stray(table)


def test_a_failing_key_range_fails_its_task_only_and_its_other_ranges_outputs_are_deleted(tmp_path: Path) -> None:
    table, model = make_table(tmp_path, commits=12, buckets=2)
    plan = plan_all(table, "compact")
    victim = plan.tasks[0]
    snap = table.snapshot()
    opts = ExecutionOptions(task_input_bytes=sum(snap.files[p].bytes for p in victim.inputs) // 3,
                            faults={f"{victim.task_id}#1": "after_first_chunk"})
    report = run_plan(plan, table, None, opts, commit=True)
    outcome = report.outcome
    assert outcome is not None and outcome.failed == [victim.task_id]
    assert outcome.committed == [plan.tasks[1].task_id]
    [failed] = [r for r in report.results if not r.ok]
    assert failed.units >= 2 and failed.adds, "the victim's other key ranges did write files"
    assert set(victim.inputs) <= set(table.snapshot().files)
    assert sorted_read(table).equals(model.table()) and not _stray(table)


def test_a_commit_that_certainly_failed_abandons_the_rest_of_the_run_and_deletes_its_files(tmp_path: Path) -> None:
    table, model = make_table(tmp_path, commits=6, buckets=4)
    plan = plan_all(table, "compact")

    def metadata_changes() -> None:
        table.set_properties({"log.checkpoint.interval": "50"})

    opts = ExecutionOptions(commit_max_tasks=1, commit_interval_seconds=0, **ONE_PER_SPARK_TASK)
    outcome = run_plan(plan, table, None, opts, commit=True, before_commit=metadata_changes).outcome
    assert outcome is not None and outcome.abandoned and outcome.error_type == "MetadataChangedError"
    assert not outcome.committed and sorted(outcome.dropped) == sorted(t.task_id for t in plan.tasks)
    assert sorted_read(table).equals(model.table()) and not _stray(table)


def test_a_commit_stopped_by_its_caller_leaves_that_group_for_orphan_cleanup(tmp_path: Path) -> None:
    table, model = make_table(tmp_path, commits=6, buckets=3)
    plan = plan_all(table, "compact")

    class LeaseLostError(RuntimeError):
        pass

    def lease_lost() -> None:
        raise LeaseLostError("the table's lease expired")

    opts = ExecutionOptions(commit_max_tasks=1, commit_interval_seconds=0, **ONE_PER_SPARK_TASK)
    outcome = run_plan(plan, table, None, opts, commit=True, before_commit=lease_lost).outcome
    assert outcome is not None and outcome.abandoned and outcome.error_type == "LeaseLostError"
    assert not outcome.committed and outcome.outputs_left
    assert len({p.split("/")[0] for p in outcome.outputs_left}) == 1  # the group it stopped; later ones deleted
    assert _stray(table) == set(outcome.outputs_left)
    assert sorted_read(table).equals(model.table())


def test_a_run_summary_lists_the_commits_of_its_groups(tmp_path: Path) -> None:
    table, model = make_table(tmp_path, commits=10, buckets=4)
    policy = tmp_path / "policy.yaml"
    policy.write_text("default:\n  compaction:\n    max_delta_files: 4\n    min_interval_hours: 0\n")
    runner = Runner(None, policy_path=policy, use_spark=False,
                    options=ExecutionOptions(commit_max_tasks=3, commit_interval_seconds=3600))
    [s] = runner.run([table.uri])
    assert s.status == "ok" and s.tasks_committed == 4 and len(s.commits) == 2 and s.version == s.commits[-1]
    assert s.spark_master is None and s.spark_tasks == 2  # small input: one task per core (2 local threads)
    assert sorted_read(table).equals(model.table())
