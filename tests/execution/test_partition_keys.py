"""Tables whose primary key includes a partition column, maintained as a user would (``maintd run``), and what a
run that did nothing but fail reports.

A unit rewrites one bucket of one partition and leaves its partition columns out of the rows it merges; those of
them that are part of the primary key must still be read, sorted, compared, split into key ranges and looked up
as key columns (``maintd.execution.inputs.constant_columns``). Every task of such a table once failed with
``ArrowInvalid: Invalid sort key column``, and the run was reported as ``partial`` with exit 1 although nothing
had committed.
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from typer.testing import CliRunner

from maintd import Table
from maintd.cli import app
from maintd.execution import ExecutionOptions, run_plan
from maintd.planner import default_policy, plan, with_overrides
from maintd.service.records import RunKind
from maintd.service.store import StateStore

runner = CliRunner()
POLICY = """
default:
  clustering:
    level1: {min_files: 2}
  compaction:
    max_delta_files: 2
    min_interval_hours: 0
"""


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for key in [k for k in os.environ if k.startswith("MAINTD_")]:
        monkeypatch.delenv(key, raising=False)
    monkeypatch.chdir(tmp_path)


def written(uri: str, key: list[str], prior_rows: str = "false") -> Table:
    """The table of the report: ``k:int64, p:string, v:string``, partitioned by ``p``, a few upserts."""
    schema = pa.schema([pa.field("k", pa.int64(), "k" not in key), pa.field("p", pa.string(), "p" not in key),
                        ("v", pa.string())])
    table = Table.create(uri, schema,
                         primary_key=key, partition_by=["p"], buckets=2, properties={"changes.prior.rows": prior_rows})
    for i in range(6):
        table.upsert(pa.table({"k": pa.array([i, i + 1, i + 2], pa.int64()), "p": ["a", "b", "a"],
                               "v": [f"v{i}"] * 3}))
    table.delete(pa.table({"k": pa.array([3], pa.int64()), "p": ["a"]}))
    return table


def expected(table: Table) -> list[tuple[Any, ...]]:
    return sorted((r["p"], r["k"], r["v"]) for r in table.read().to_pylist())


def run_cli(tmp_path: Path, uri: str, *extra: str) -> Any:
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    config = tmp_path / "maintd.yaml"
    config.write_text(f"state_dir: {tmp_path / 'state'}\n")
    return runner.invoke(app, ["run", uri, "--policy", str(policy), "--config", str(config), "--json", *extra])


@pytest.mark.parametrize("prior_rows", ["false", "lookup"])
@pytest.mark.parametrize("key", [["k", "p"], ["p", "k"]], ids=["key (k, p)", "key (p, k)"])
def test_maintd_run_clusters_and_compacts_a_table_whose_key_includes_its_partition_column(
        tmp_path: Path, key: list[str], prior_rows: str) -> None:
    uri = str(tmp_path / "t")
    table = written(uri, key, prior_rows)
    before, files = expected(table), len(table.snapshot().files)
    for _ in range(2):  # the first run clusters the level-0 files, the second compacts the bucket
        result = run_cli(tmp_path, uri)
        assert result.exit_code == 0, result.output
        (summary,) = json.loads(result.stdout[result.stdout.index("["):])
        assert summary["status"] == "ok", summary
        assert summary["tasks_committed"] == summary["tasks_planned"] > 0
        table.upsert(pa.table({"k": pa.array([100], pa.int64()), "p": ["b"], "v": ["late"]}))
        before = sorted([*(r for r in before if r[:2] != ("b", 100)), ("b", 100, "late")])
    after = Table.open(uri)
    assert expected(after) == before
    assert len(after.snapshot().files) < files
    assert {f.kind for f in after.snapshot().files.values()} >= {"base"}


@pytest.mark.parametrize("key", [["k", "p"], ["p", "k"]], ids=["key (k, p)", "key (p, k)"])
def test_key_ranges_of_a_compaction_cut_keys_that_include_the_partition_column(tmp_path: Path, key: list[str]) -> None:
    table = written(str(tmp_path / "t"), key, "true")
    for i in range(3):
        ks = pa.array(range(i * 3000, i * 3000 + 6000), pa.int64())
        table.upsert(pa.table({"k": ks, "p": ["a", "b"] * 3000, "v": [f"bulk{i}"] * 6000}))
    compact = {"clustering": {"enabled": False}, "compaction": {"max_delta_files": 1, "min_interval_hours": 0,
                                                                 "target_file_bytes": 4_000}}
    policy = with_overrides(default_policy(), compact)
    first = run_plan(plan(table.snapshot(), policy, datetime.now(UTC), table.uri), table, None, commit=True)
    assert all(r.ok for r in first.results), [r.error for r in first.results]
    assert max(len([f for f in fs if f.kind == "base"]) for fs in table.snapshot().by_bucket().values()) > 1
    table.upsert(pa.table({"k": pa.array(range(0, 12000, 14), pa.int64()), "p": ["a"] * 858, "v": ["again"] * 858}))
    before = expected(table)
    made = plan(table.snapshot(), policy, datetime.now(UTC), table.uri)
    report = run_plan(made, table, None, ExecutionOptions(task_input_bytes=3_000, task_memory_bytes=60_000),
                      commit=True)
    assert all(r.ok for r in report.results), [r.error for r in report.results]
    assert report.units > len(made.tasks)  # split into key ranges at the BaseFiles' first keys
    after = Table.open(table.uri)
    assert expected(after) == before
    feed = after.changes(after.version - 2, after.version)  # the upsert: read from the compaction's prior rows
    assert feed.num_rows == 858 and set(feed.column("_change").to_pylist()) <= {"update", "insert"}


def test_a_run_in_which_every_task_failed_is_failed_not_partial(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    written(uri, ["k"])
    config = tmp_path / "maintd.yaml"
    config.write_text(f"store:\n  url: sqlite:///{tmp_path / 'maintd.db'}\nspark:\n  conf:\n"
                      "    spark.maintd.faults: '{\"*\": \"after_first_chunk\"}'\n")
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    result = runner.invoke(app, ["run", uri, "--policy", str(policy), "--config", str(config), "--json"])
    assert result.exit_code == 1, result.output
    (summary,) = json.loads(result.stdout[result.stdout.index("["):])
    assert summary["status"] == "failed", summary
    assert summary["tasks_committed"] == 0 and summary["tasks_failed"] == summary["tasks_planned"] > 0
    store = StateStore(f"sqlite:///{tmp_path / 'maintd.db'}")
    try:
        (run,) = store.history(uri, kind=RunKind.MAINTENANCE)
        assert run.status == "failed", run
        assert (run.metrics or {}).get("status", "failed") == "failed", run.metrics
    finally:
        store.close()
