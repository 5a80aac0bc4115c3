"""One-shot runs: discovery, the runner, ``maintd run`` and ``maintd demo`` through the CLI."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from maintd.cli import demo as demo_cli
from maintd.cli import run as run_cli
from maintd.execution.runner import Runner
from maintd.service.discovery import discover, tables_of

from .helpers import make_table, sorted_read

POLICY = """
default:
  compaction:
    max_delta_files: 4
    min_interval_hours: 0
"""


def _app() -> typer.Typer:
    app = typer.Typer()
    run_cli.register(app)
    demo_cli.register(app)

    @app.callback()
    def root() -> None:
        """maintd (test root)."""

    return app


def test_tables_are_discovered_under_warehouse_roots(tmp_path: Path) -> None:
    make_table(tmp_path / "a", commits=1)
    make_table(tmp_path / "nested" / "b", commits=1)
    (tmp_path / "empty").mkdir()
    found = tables_of(discover([str(tmp_path)]))
    assert sorted(found) == sorted([str(tmp_path / "a" / "t"), str(tmp_path / "nested" / "b" / "t")])


def test_a_run_compacts_every_bucket_and_reports_it(tmp_path: Path) -> None:
    table, model = make_table(tmp_path, commits=10)
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    files_before = len(table.snapshot().files)
    [s] = Runner(None, policy_path=policy, use_spark=False).run([table.uri])
    assert s.status == "ok" and s.tasks_committed == s.tasks_planned > 0, s
    assert s.before.files == files_before and s.after.files < files_before and s.bytes_written > 0
    assert sorted_read(table).equals(model.table())


def test_a_run_reclaims_after_maintenance_what_retention_no_longer_needs(tmp_path: Path) -> None:
    table, model = make_table(tmp_path, commits=10)
    table.set_properties({"acid.data.retain.hours": 0})
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    replaced = set(table.snapshot().files)
    [s] = Runner(None, policy_path=policy, use_spark=False, reclaim=True).run([table.uri])
    assert s.status == "ok" and s.reclaim is not None, s
    assert s.reclaim["data_files_deleted"] == len(replaced)
    assert s.reclaim["oldest_retained_version"] == s.reclaim["expire_version"] - 1 == table.version - 1, \
        "the maintenance commit is retained; the expire record follows it"
    assert not any((Path(table.uri) / p).exists() for p in replaced)
    assert sorted_read(table).equals(model.table())


def test_a_missing_table_fails_its_summary_only(tmp_path: Path) -> None:
    table, _ = make_table(tmp_path, commits=2)
    a, b = Runner(None, use_spark=False).run([str(tmp_path / "nope"), table.uri], dry_run=True)
    assert a.status == "failed" and "TableNotFoundError" in (a.error or "")
    assert b.status == "dry-run"


@pytest.mark.spark
def test_maintd_run_prints_json_and_exits_non_zero_naming_failing_tables(tmp_path: Path, spark: Any,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    table, model = make_table(tmp_path, commits=10)
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    monkeypatch.setenv("MAINTD_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("MAINTD_SPARK__CONF", json.dumps({"spark.maintd.inProcess.maxInputBytes": "0"}))
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(_app(), ["run", table.uri, "--policy", str(policy), "--json"])
    assert result.exit_code == 0, result.output
    [summary] = json.loads(result.stdout)
    assert summary["status"] == "ok" and summary["tasks_committed"] > 0
    assert summary["engine"] == "spark", "with maxInputBytes 0 every run goes to Spark"
    assert summary["spark_master"] == spark.sparkContext.master and summary["spark_app_id"].startswith("local-")
    assert summary["spark_tasks"] >= 2 and summary["commits"] == [summary["version"]]
    assert summary["reclaim"]["oldest_retained_version"] <= summary["version"]
    assert sorted_read(table).equals(model.table())
    missing = str(tmp_path / "missing")
    result = CliRunner().invoke(_app(), ["run", missing, "--policy", str(policy)])
    assert result.exit_code == 2 and missing in result.output, "a URI that is not a table is refused up front"


@pytest.mark.spark
def test_the_demo_shows_fewer_files_and_identical_reads(tmp_path: Path, spark: Any) -> None:
    from rich.console import Console

    console = Console(record=True, width=140)
    assert demo_cli.run_demo(console, tmp_path, batches=40, rows=200, spark=spark)
    text = console.export_text()
    assert "rows read before and after are identical" in text
    found = re.search(r"read time (\d+) ms -> (\d+) ms \(([^)]*)\); files (\d+) -> (\d+)", text)
    assert found, text
    before_ms, after_ms, change, files_before, files_after = found.groups()
    assert int(files_after) < int(files_before)
    # The word must agree with the figures it stands next to (the old demo said "faster" when slower).
    assert ("faster" in change and int(after_ms) <= int(before_ms)) or (
        "slower" in change and int(after_ms) >= int(before_ms)) or change == "as fast", text


@pytest.mark.parametrize(("before", "after", "said"), [(2.0, 1.0, "2.0x faster"), (1.0, 1.5, "1.5x slower"),
                                                       (1.0, 1.0, "as fast"), (1.0, 0.0, "too fast to compare")])
def test_the_demo_calls_a_slower_read_slower(before: float, after: float, said: str) -> None:
    from rich.text import Text

    assert Text.from_markup(demo_cli.speed_change(before, after)).plain == said


def test_a_table_of_a_newer_protocol_is_reported_and_nothing_is_written_into_it(tmp_path: Path) -> None:
    from maintd.table.log.actions import CommitInfo, Protocol
    from maintd.table.log.commitfile import encode_commit
    from maintd.table.log.tablelog import commit_path

    table, _ = make_table(tmp_path, commits=10)
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    v = table.version + 1
    info = CommitInfo(operation="UPGRADE PROTOCOL", timestamp=2**41, txn_id="newer")
    (Path(table.uri) / commit_path(v)).write_bytes(encode_commit([info, Protocol(min_reader_version=2,
                                                                                 min_writer_version=8)], version=v))
    before = sorted(Path(table.uri).rglob("*"))
    [s] = Runner(None, policy_path=policy, use_spark=False, reclaim=True).run([table.uri])
    assert s.status == "failed" and s.error_type == "UnsupportedProtocolError" and "writer protocol version 8" in (
        s.error or "")
    assert sorted(Path(table.uri).rglob("*")) == before


def test_a_small_plan_runs_in_process_without_starting_spark(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import maintd.execution.runner as runner_mod

    def no_session(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a plan within spark.maintd.inProcess.maxInputBytes must not start Spark")

    monkeypatch.setattr(runner_mod, "spark_session", no_session)
    table, model = make_table(tmp_path, commits=10)
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    [summary] = Runner(None, policy_path=policy, use_spark=True).run([table.uri])
    assert summary.status == "ok" and summary.tasks_committed > 0, summary.error
    assert summary.engine == "in-process" and summary.spark_master is None and summary.spark_app_id is None
    assert sorted_read(table).equals(model.table())


def test_a_plan_above_the_in_process_limit_asks_for_spark(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import maintd.execution.runner as runner_mod
    from maintd.execution.spark import options_from_settings

    asked: list[object] = []

    def session(*args: Any, **kwargs: Any) -> Any:
        asked.append(args)
        raise RuntimeError("no Spark here")

    monkeypatch.setattr(runner_mod, "spark_session", session)
    table, _ = make_table(tmp_path, commits=10)
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    size = sum(f.bytes for f in table.snapshot().files.values())
    conf = type("S", (), {"conf": {"spark.maintd.inProcess.maxInputBytes": str(size - 1)}})()
    options = options_from_settings(conf)
    assert options.in_process_max_bytes == size - 1
    [summary] = Runner(None, policy_path=policy, use_spark=True, options=options).run([table.uri])
    assert asked and summary.status == "failed" and "no Spark here" in (summary.error or "")
    asked.clear()
    options = options_from_settings(type("S", (), {"conf": {"spark.maintd.inProcess.maxInputBytes": str(size)}})())
    [summary] = Runner(None, policy_path=policy, use_spark=True, options=options).run([table.uri])
    assert not asked and summary.status == "ok" and summary.engine == "in-process"


def test_runs_in_process_counts_the_plans_input_files(tmp_path: Path) -> None:
    from maintd.execution.driver import in_process_threads, runs_in_process, usable_cpus
    from maintd.execution.specs import ExecutionOptions, PlanDoc, PlanTaskDoc

    table, _ = make_table(tmp_path, commits=6)
    snap = table.snapshot()
    files = sorted(snap.files.values(), key=lambda f: f.path)
    size = sum(f.bytes for f in files)
    plan = PlanDoc(table_uri=table.uri, read_version=snap.version, tasks=(
        PlanTaskDoc(task_id="a", kind="compact", partition={}, bucket=0, target_level=None,
                    inputs=tuple(f.path for f in files[:3])),
        PlanTaskDoc(task_id="b", kind="compact", partition={}, bucket=1, target_level=None,
                    inputs=tuple(f.path for f in files[3:]))))
    assert runs_in_process(plan, snap, ExecutionOptions(in_process_max_bytes=size))
    assert not runs_in_process(plan, snap, ExecutionOptions(in_process_max_bytes=size - 1)), "both tasks count"
    assert not runs_in_process(plan, snap, ExecutionOptions(in_process_max_bytes=0))
    for fault in ("kill_once:/tmp/x", "hold_once:/tmp/x"):  # they would kill or hold this very process
        assert not runs_in_process(plan, snap, ExecutionOptions(in_process_max_bytes=size, faults={"*": fault}))
    assert runs_in_process(plan, snap, ExecutionOptions(in_process_max_bytes=size, faults={"*": "after_first_chunk"}))
    empty = PlanDoc(table_uri=table.uri, read_version=snap.version, tasks=())
    assert not runs_in_process(empty, snap, ExecutionOptions()), "nothing to run: nowhere to run it"
    assert in_process_threads(ExecutionOptions(in_process_threads=3)) == 3
    assert in_process_threads(ExecutionOptions(in_process_workers="threads")) == usable_cpus()
    assert in_process_threads(ExecutionOptions()) == usable_cpus()
