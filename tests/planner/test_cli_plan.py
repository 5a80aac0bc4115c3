"""``maintd plan`` on real tables written by the table API."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
import typer
from typer.testing import CliRunner

from maintd.cli.plan import register
from maintd.planner import MaintenancePlan
from maintd.table import Table

app = typer.Typer()


@app.callback()
def _root() -> None:
    """maintd (test root)."""


register(app)
runner = CliRunner()


@pytest.fixture
def table_uri(tmp_path: Path) -> str:
    uri = str(tmp_path / "orders")
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.string())])
    t = Table.create(uri, schema, "id", buckets=2, name="db.orders",
                     properties={"maintd.clustering.level1.min_files": "3"})
    for i in range(4):
        t.upsert(pa.table({"id": [i, i + 10, i + 11], "v": [f"v{i}"] * 3}))
    return uri


def test_plan_prints_tasks_for_a_table_with_enough_small_files(table_uri: str) -> None:
    r = runner.invoke(app, ["plan", table_uri])
    assert r.exit_code == 0, r.output
    assert "task(s)" in r.output and "cluster" in r.output and "table properties" in r.output


def test_plan_json_is_a_maintenance_plan_per_line(table_uri: str) -> None:
    r = runner.invoke(app, ["plan", table_uri, "--json"])
    assert r.exit_code == 0, r.output
    p = MaintenancePlan.model_validate_json(r.stdout.strip())
    assert p.tasks and all(t.kind == "cluster" and t.target_level == 1 and t.input_files >= 3 for t in p.tasks)
    assert p.read_version == 4 and p.policy_name.endswith("table properties")


def test_explain_shows_every_bucket_with_its_rule(table_uri: str, tmp_path: Path) -> None:
    pol = tmp_path / "p.yaml"
    pol.write_text("tables: [{match: 'db.*', overrides: {clustering: {level1: {min_files: 12}}}}]\n")
    r = runner.invoke(app, ["plan", table_uri, "--policy", str(pol), "--explain"])
    assert r.exit_code == 0, r.output
    # the table property (min_files 3) overrides the file's rule (12)
    assert r.output.count("bucket ") >= 2 and "[clustering.level1.min_files]" in r.output


def test_explain_lists_each_bucket_once_with_its_task_in_narrow_lines(table_uri: str) -> None:
    r = runner.invoke(app, ["plan", table_uri, "--explain"])
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    heads = [line for line in lines if line.startswith("  bucket ")]
    assert sorted(h.split(":")[0] for h in heads) == ["  bucket 0", "  bucket 1"]  # each bucket once, no table
    assert any("cluster to level 1" in h and "file(s)" in h for h in heads)
    assert max(len(line) for line in lines[1:]) <= 100


def test_a_missing_table_exits_2_and_a_failing_one_1(table_uri: str, tmp_path: Path) -> None:
    r = runner.invoke(app, ["plan", str(tmp_path / "missing")])
    assert r.exit_code == 2 and "no table at" in r.output
    victim = next(p for p in (Path(table_uri) / "_log").iterdir() if p.name.endswith(".json"))
    victim.write_text("{not json")
    r = runner.invoke(app, ["plan", table_uri])
    assert r.exit_code == 1, r.output


def test_explain_says_why_nothing_runs(tmp_path: Path) -> None:
    uri = str(tmp_path / "quiet")
    t = Table.create(uri, pa.schema([pa.field("id", pa.int64(), nullable=False)]), "id", buckets=1)
    t.upsert(pa.table({"id": [1]}))
    r = runner.invoke(app, ["plan", uri, "--explain"])
    assert r.exit_code == 0, r.output
    assert "skip" in r.output and "1 level-0 files < min_files 12" in r.output


def test_show_policy_prints_the_effective_policy(table_uri: str) -> None:
    r = runner.invoke(app, ["plan", table_uri, "--show-policy"])
    assert r.exit_code == 0, r.output
    assert "min_files: 3" in r.output


def test_one_failing_table_does_not_stop_the_others(table_uri: str, tmp_path: Path) -> None:
    bad = str(tmp_path / "bad")
    t = Table.create(bad, pa.schema([pa.field("id", pa.int64(), nullable=False)]), "id",
                     properties={"maintd.budget.max_tasks": "0"})
    t.upsert(pa.table({"id": [1]}))
    r = runner.invoke(app, ["plan", bad, str(tmp_path / "missing"), table_uri, "--json"])
    assert r.exit_code == 2  # a missing table and a bad override are bad input
    lines = [json.loads(x) for x in r.stdout.strip().splitlines()]
    assert "maintd.budget.max_tasks" in lines[0]["error"]
    assert "no table" in lines[1]["error"]
    assert MaintenancePlan.model_validate(lines[2]).tasks


def test_a_bad_policy_file_exits_2_naming_the_file(table_uri: str, tmp_path: Path) -> None:
    pol = tmp_path / "bad.yaml"
    pol.write_text("default: {budget: {max_tasks: -1}}\n")
    r = runner.invoke(app, ["plan", table_uri, "--policy", str(pol)])
    assert r.exit_code == 2 and "bad.yaml" in r.output and "budget.max_tasks" in r.output
