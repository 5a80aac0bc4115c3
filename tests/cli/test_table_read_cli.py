"""``maintd table create | describe | history`` and ``maintd read`` through typer's runner."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from maintd import Table
from maintd.cli import app

runner = CliRunner()


def invoke(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def table_uri(tmp_path: Path) -> str:
    uri = str(tmp_path / "orders")
    code, _, err = invoke("table", "create", uri, "--schema", "id:int64!,name:string,ds:string",
                          "--primary-key", "id", "--partition-by", "ds", "--buckets", "4",
                          "--property", "acid.data.retain.hours=48")
    assert code == 0, err
    t = Table.open(uri)
    t.upsert(pa.table({"id": [1, 2, 3], "name": ["a", "b", "c"], "ds": ["x", "x", "y"]}))
    t.delete(pa.table({"id": [2], "ds": ["x"]}))
    t.upsert(pa.table({"id": [3], "name": ["c2"], "ds": ["y"]}))
    return uri


def test_create_writes_version_zero_with_the_given_layout(table_uri: str) -> None:
    md = Table.open(table_uri).snapshot(0).metadata
    assert md.primary_key == ("id",)
    assert md.partition_by == ("ds",)
    assert md.buckets == 4
    assert md.properties["acid.data.retain.hours"] == "48"
    assert [(f.name, f.type, f.nullable) for f in md.fields] == [
        ("id", "int64", False), ("name", "string", True), ("ds", "string", True)]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--property", "nonsense=1"], "unknown property 'nonsense'"),
        (["--property", "acid.data.retain.hours=500"], "acid.data.retain.hours"),
        (["--property", "novalue"], "is not KEY=VALUE"),
        (["--buckets", "0"], "write.bucket.num"),
        (["--buckets", "16", "--property", "write.bucket.num=8"], "buckets=16 contradicts write.bucket.num=8"),
        (["--property", "maintd.compaction.max_delta_files=-3"], "maintd.compaction.max_delta_files"),
        (["--property", "maintd.clustering.nonsense=1"], "maintd.clustering.nonsense"),
    ],
)
def test_create_rejects_bad_input_and_writes_nothing(tmp_path: Path, extra: list[str], message: str) -> None:
    uri = str(tmp_path / "bad")
    code, _, err = invoke("table", "create", uri, "--schema", "id:int64!", "--primary-key", "id", *extra)
    assert code == 2
    assert message in err
    assert not (tmp_path / "bad" / "_log").exists() or not any((tmp_path / "bad" / "_log").iterdir())


def test_create_says_what_identifies_a_row_and_warns_when_the_key_leaves_out_a_partition(tmp_path: Path) -> None:
    code, out, err = invoke("table", "create", str(tmp_path / "a"), "--schema", "id:int64!,ds:string",
                            "--primary-key", "id", "--partition-by", "ds")
    assert code == 0 and "a row is identified by (ds, id)" in out
    assert err.startswith("warning: ") and "does not include partition column(s) ds" in err and "second row" in err
    code, out, err = invoke("table", "create", str(tmp_path / "b"), "--schema", "id:int64!,ds:string!",
                            "--primary-key", "ds", "--primary-key", "id", "--partition-by", "ds")
    assert code == 0 and "a row is identified by (ds, id)" in out and err == ""


def test_create_refuses_a_nullable_key_column_naming_it(tmp_path: Path) -> None:
    code, _, err = invoke("table", "create", str(tmp_path / "t"), "--schema", "id:int64!,k:string,v:string",
                          "--primary-key", "id", "--primary-key", "k")
    assert code == 2
    assert err.count("\n") == 1 and "primary key column(s) k are nullable" in err and "(k:string!)" in err
    assert not (tmp_path / "t" / "_log").exists()


def test_create_refuses_an_existing_table(table_uri: str) -> None:
    code, _, err = invoke("table", "create", table_uri, "--schema", "id:int64!", "--primary-key", "id")
    assert code == 2
    assert "already exists" in err
    assert Table.open(table_uri).version == 3


def test_describe_json_counts_files_per_layer_and_bucket(table_uri: str) -> None:
    code, out, _ = invoke("table", "describe", table_uri, "--json")
    assert code == 0
    desc = json.loads(out)
    snap = Table.open(table_uri).snapshot()
    assert desc["version"] == 3
    assert desc["files"] == len(snap.files)
    assert desc["layers"]["delta L0"]["files"] == len(snap.files)
    assert sum(b["delta L0"] for b in desc["per_bucket"]) == len(snap.files)
    assert {b["partition"] for b in desc["per_bucket"]} == {"ds=x", "ds=y"}


def test_describe_prints_schema_and_properties(table_uri: str) -> None:
    code, out, _ = invoke("table", "describe", table_uri)
    assert code == 0
    assert "id:int64!, name:string, ds:string" in out
    assert "acid.data.retain.hours=48" in out


def test_set_properties_commits_valid_properties_and_names_bad_ones(table_uri: str) -> None:
    code, out, _ = invoke("table", "set-properties", table_uri, "--property", "acid.data.retain.hours=6")
    assert code == 0 and "at version 4" in out
    code, _, err = invoke("table", "set-properties", table_uri, "--property", "acid.data.retain.hours=200")
    assert code == 2 and "acid.data.retain.hours=200 is out of range" in err
    code, _, err = invoke("table", "set-properties", table_uri, "--property", "write.bucket.num=3")
    assert code == 2 and "fixed after create" in err
    code, _, err = invoke("table", "set-properties", table_uri, "--property", "maintd.compaction.enabled=maybe")
    assert code == 2 and "maintd.compaction.enabled" in err
    code, _, err = invoke("table", "set-properties", table_uri, "--property", "oops")
    assert code == 2 and "--property acid.data.retain.hours=24" in err
    code, out, _ = invoke("table", "describe", table_uri, "--json")
    assert json.loads(out)["properties"]["acid.data.retain.hours"] == "6" and json.loads(out)["version"] == 4


def test_history_lists_commits_newest_first(table_uri: str) -> None:
    code, out, _ = invoke("table", "history", table_uri, "--json")
    assert code == 0
    rows = json.loads(out)
    assert [r["version"] for r in rows] == [3, 2, 1, 0]
    assert [r["operation"] for r in rows] == ["UPSERT", "DELETE", "UPSERT", "CREATE TABLE"]
    code, out, _ = invoke("table", "history", table_uri, "--json", "--limit", "2")
    assert [r["version"] for r in json.loads(out)] == [3, 2]


def test_read_with_a_limit_reads_only_the_buckets_it_needs_and_says_how_many_rows_there_are(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import maintd.table.read.scan as scan

    uri = str(tmp_path / "many")
    t = Table.create(uri, "id:int64!,v:string", primary_key="id", buckets=8)
    t.upsert(pa.table({"id": pa.array(range(400), pa.int64()), "v": ["x"] * 400}))
    units: list[object] = []
    read_unit = scan.read_unit
    monkeypatch.setattr(scan, "read_unit", lambda *a, **k: units.append(a[2]) or read_unit(*a, **k))
    code, out, err = invoke("read", uri, "--limit", "5")
    assert code == 0 and len(out.splitlines()) == 1 + 5
    assert len(units) == 1  # one bucket of eight holds enough rows
    assert "5 of 400 rows (--limit 5)" in err  # one file per bucket: the statistics count the rows exactly
    t.upsert(pa.table({"id": pa.array([1, 2], pa.int64()), "v": ["y", "y"]}))
    code, out, err = invoke("read", uri, "--limit", "5")
    assert code == 0 and "5 of at most 402 rows (--limit 5)" in err  # an update counts once per file
    code, out, err = invoke("read", uri, "--limit", "500")
    assert code == 0 and len(out.splitlines()) == 1 + 400 and "rows" not in err  # all shown: nothing to say


def test_read_as_of_a_time_says_which_version_it_read(table_uri: str) -> None:
    import datetime as dt

    t = Table.open(table_uri)
    at = next(c for c in t.history() if c.version == 2).time + dt.timedelta(milliseconds=1)
    code, out, err = invoke("read", table_uri, "--as-of", at.isoformat(), "--json")
    assert code == 0 and f"reading version 2, the version current at {at.isoformat()}" in err
    assert sorted(r["id"] for r in json.loads(out)) == [1, 3]


def test_read_latest_and_time_travel(table_uri: str) -> None:
    code, out, _ = invoke("read", table_uri, "--json")
    assert code == 0
    assert sorted((r["id"], r["name"]) for r in json.loads(out)) == [(1, "a"), (3, "c2")]
    code, out, _ = invoke("read", table_uri, "--version", "1", "--json")
    assert sorted(r["id"] for r in json.loads(out)) == [1, 2, 3]


def test_read_plain_output_is_tab_separated_with_a_limit(table_uri: str) -> None:
    code, out, _ = invoke("read", table_uri, "--limit", "1", "--column", "id", "--column", "name")
    assert code == 0
    lines = out.strip().splitlines()
    assert lines[0] == "id\tname"
    assert len(lines) == 2


def test_read_changes_between_versions(table_uri: str) -> None:
    code, out, _ = invoke("read", table_uri, "--changes-from", "1", "--json")
    assert code == 0
    changes = {r["id"]: r["_change"] for r in json.loads(out)}
    assert changes == {2: "delete", 3: "update"}


def test_read_writes_parquet(table_uri: str, tmp_path: Path) -> None:
    target = tmp_path / "out" / "rows.parquet"
    code, _, err = invoke("read", table_uri, "--output", str(target))
    assert code == 0, err
    assert pq.read_table(target).num_rows == 2


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--version", "99"], "no version 99"),
        (["--changes-to", "2"], "--changes-to needs --changes-from"),
        (["--changes-from", "1", "--version", "2"], "cannot be combined"),
        (["--output", "rows.csv"], "must end in .parquet"),
    ],
)
def test_read_rejects_bad_arguments(table_uri: str, args: list[str], message: str) -> None:
    code, _, err = invoke("read", table_uri, *args)
    assert code == 2
    assert message in err


def test_commands_on_a_missing_table_name_it(tmp_path: Path) -> None:
    missing = str(tmp_path / "nothing")
    for args in (["read", missing], ["table", "describe", missing], ["table", "history", missing]):
        code, _, err = invoke(*args)
        assert code == 2
        assert "no table at" in err and "nothing" in err


def test_version_flag_and_help_list_the_commands() -> None:
    code, out, _ = invoke("--version")
    assert code == 0 and out.startswith("maintd ")
    code, out, _ = invoke("--help")
    assert code == 0
    for command in ("table", "read", "plan", "run", "gc", "purge", "demo", "daemon", "status", "history"):
        assert command in out


def test_set_properties_switches_prior_rows_on_and_describe_shows_the_protocol_and_the_files(table_uri: str) -> None:
    from maintd.execution import PlanDoc, PlanTaskDoc, commit_rewrites, run_plan

    code, out, err = invoke("table", "set-properties", table_uri, "--property", "changes.prior.rows=true")
    assert code == 0 and "changes.prior.rows=true" in out, err
    table = Table.open(table_uri)
    for _ in range(2):  # BaseFiles first, then a compaction that folds new rows into them
        snap = table.snapshot()
        tasks = tuple(PlanTaskDoc(task_id=f"c-{dict(p)}-{b}", kind="compact", partition=dict(p), bucket=b,
                                  inputs=tuple(f.path for f in fs)) for (p, b), fs in snap.by_bucket().items())
        plan = PlanDoc(table_uri=table.uri, read_version=snap.version, tasks=tasks)
        assert commit_rewrites(table, plan, run_plan(plan, table).results).committed
        table.upsert(pa.table({"id": [1, 50], "name": ["n", "m"], "ds": ["x", "x"]}))
    desc = json.loads(invoke("table", "describe", table_uri, "--json")[1])
    priors = table.snapshot().priors
    assert desc["protocol"] == {"reader": 4, "writer": 4, "features": ["pins", "priorRows"]}
    assert desc["prior_rows"]["files"] == len(priors) > 0
    code, out, _ = invoke("table", "describe", table_uri)
    assert code == 0 and "protocol: reader 4, writer 4 (implies pins, priorRows)" in out
    assert f"prior-rows files (for the change feed): {len(priors)}" in out and "looked up" not in out
    # with lookup, a clustering's file: counted apart while its BaseFiles live
    assert invoke("table", "set-properties", table_uri, "--property", "changes.prior.rows=lookup")[0] == 0
    table.upsert(pa.table({"id": [1, 51], "name": ["o", "p"], "ds": ["x", "x"]}))
    snap = table.snapshot()
    tasks = tuple(PlanTaskDoc(task_id=f"k-{dict(p)}-{b}", kind="cluster", partition=dict(p), bucket=b, target_level=1,
                              inputs=tuple(f.path for f in fs if f.kind == "delta"))
                  for (p, b), fs in snap.by_bucket().items() if sum(f.kind == "delta" for f in fs) >= 2)
    plan = PlanDoc(table_uri=table.uri, read_version=snap.version, tasks=tasks)
    assert tasks and commit_rewrites(table, plan, run_plan(plan, table).results).committed
    desc = json.loads(invoke("table", "describe", table_uri, "--json")[1])
    assert desc["protocol"] == {"reader": 5, "writer": 5, "features": ["lookedUpPriorRows", "pins", "priorRows"]}
    assert desc["prior_rows"]["looked_up"] == len(tasks)
    assert f"({len(tasks)} looked up by clusterings, their BaseFiles live)" in invoke("table", "describe", table_uri)[1]
