"""The public ``maintd.Table``: opened by URI, inspected (repr, schema, files, a pyarrow dataset), and
maintained, reclaimed and purged from Python with the CLI's code and safe defaults."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import maintd
from maintd import TableNotFoundError, TaskExecutionError, VersionNotFoundError
from maintd.storage import storage_for_uri

POLICY = """
default:
  compaction:
    max_delta_files: 3
    min_interval_hours: 0
"""


def _table(root: Path, commits: int = 6) -> maintd.Table:
    table = maintd.Table.create(str(root / "t"), "id:int64!,region:string!,v:double", primary_key=["region", "id"],
                                partition_by="region", buckets=2)
    rng = np.random.default_rng(3)
    for _ in range(commits):
        ids = rng.integers(0, 200, 50)
        table.upsert(pa.table({"id": pa.array(ids, pa.int64()), "region": np.where(ids % 2, "eu", "us"),
                               "v": rng.random(50)}))
    return table


def _data_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.parquet") if "_log" not in p.parts)


def _policy(tmp_path: Path) -> Path:
    path = tmp_path / "policy.yaml"
    path.write_text(POLICY)
    return path


def test_table_of_a_uri_opens_the_table_as_open_does(tmp_path: Path) -> None:
    created = _table(tmp_path, commits=1)
    for opened in (maintd.Table(created.uri), maintd.Table(tmp_path / "t"), maintd.Table.open(created.uri)):
        assert isinstance(opened, maintd.Table) and opened.uri == created.uri
        assert opened.version == created.version == 1
    assert maintd.Table(storage_for_uri(created.uri)).version == 1  # a storage opens it as before
    with pytest.raises(TableNotFoundError, match="no table at"):
        maintd.Table(str(tmp_path / "nothing"))
    with pytest.raises(maintd.InvalidInputError, match="takes a table URI"):
        maintd.Table(42)  # type: ignore[arg-type]


def test_repr_schema_and_files_describe_the_table(tmp_path: Path) -> None:
    table = _table(tmp_path, commits=2)
    assert repr(maintd.Table(table.uri)) == f"Table({table.uri!r})"  # nothing read yet: nothing claimed
    table.snapshot()
    assert repr(table) == (f"Table({table.uri!r}, version=2, primary_key=['region', 'id'], "
                           f"partition_by=['region'], buckets=2, files={len(table.snapshot().files)})")
    assert table.schema() == pa.schema([pa.field("id", pa.int64(), False), pa.field("region", pa.string(), False),
                                        pa.field("v", pa.float64())])
    files = table.files()
    snap = table.snapshot()
    assert {f.path for f in files} == set(snap.files)
    for f in files:
        add = snap.files[f.path]
        assert (f.kind, f.level, f.rows, f.bytes, f.bucket) == ("delta", 0, add.rows, add.bytes, add.bucket)
        assert f.uri == f"{table.uri}/{f.path}" and Path(f.uri.removeprefix("file://")).is_file()
        assert f.partition == {"region": add.partition["region"]}
    assert [f.path for f in table.files(version=1)] == [f.path for f in files if f.max_version == 1]
    assert len(table.files(version=0)) == 0


def test_a_pyarrow_dataset_holds_the_merged_rows_of_a_version(tmp_path: Path) -> None:
    table = _table(tmp_path, commits=3)
    import pyarrow.dataset as ds

    dataset = table.to_pyarrow_dataset()
    assert isinstance(dataset, ds.Dataset)
    key = [("region", "ascending"), ("id", "ascending")]
    assert dataset.to_table().sort_by(key).equals(table.read().sort_by(key))
    assert dataset.count_rows() == table.read().num_rows  # scanned again: still there
    eu = dataset.to_table(filter=pc.field("region") == "eu").sort_by(key)
    assert eu.equals(table.to_pyarrow_dataset(filter="region = 'eu'").to_table().sort_by(key))
    old = table.to_pyarrow_dataset(version=1, columns=["id"])
    assert old.schema.names == ["id"] and old.count_rows() == table.read(version=1).num_rows


def test_maintain_plans_executes_and_commits_as_maintd_run(tmp_path: Path) -> None:
    table = _table(tmp_path)
    before, files_before, version = table.read(), len(table.snapshot().files), table.version
    planned = table.maintain(_policy(tmp_path), dry_run=True, use_spark=False)
    assert planned.status == "dry-run" and planned.tasks_planned > 0 and planned.planned
    assert table.version == version  # a dry run writes nothing
    summary = table.maintain(policy=_policy(tmp_path), use_spark=False)
    assert summary.status == "ok" and summary.tasks_committed == summary.tasks_planned > 0
    assert summary.before.files == files_before and summary.after.files < files_before
    assert summary.commits and table.version == summary.commits[-1]
    key = [("region", "ascending"), ("id", "ascending")]
    assert table.read().sort_by(key).equals(before.sort_by(key))
    assert {f.kind for f in table.files()} == {"base"}
    assert table.maintain(policy=_policy(tmp_path), use_spark=False).status == "nothing"


def test_a_maintenance_that_fails_raises_with_its_summary(tmp_path: Path) -> None:
    table = _table(tmp_path)
    victim = table.files()[0]
    Path(victim.uri.removeprefix("file://")).unlink()
    with pytest.raises(TaskExecutionError, match=r"maintenance (failed|partial)") as caught:
        table.maintain(policy=_policy(tmp_path), use_spark=False)
    assert caught.value.summary is not None and caught.value.summary.status in ("failed", "partial")


def test_reclaim_and_purge_only_report_unless_told_to_delete(tmp_path: Path) -> None:
    table = _table(tmp_path)
    table.maintain(policy=_policy(tmp_path), use_spark=False)
    later = dt.datetime.now(dt.UTC) + dt.timedelta(days=30)  # past retention: the replaced files expire
    on_disk = _data_files(tmp_path / "t")
    report = table.reclaim(now=later)
    assert report.dry_run and report.data_files_deleted > 0 and report.versions_expired > 0
    assert _data_files(tmp_path / "t") == on_disk  # nothing deleted
    done = table.reclaim(dry_run=False, now=later)
    assert not done.dry_run and done.data_files_deleted == report.data_files_deleted
    assert len(_data_files(tmp_path / "t")) == len(on_disk) - done.data_files_deleted
    table.upsert(pa.table({"id": pa.array([1], pa.int64()), "region": ["eu"], "v": [0.5]}))
    version, rows = table.version, table.read()
    preview = table.purge()
    assert preview.dry_run and preview.operation == "purge" and table.version == version
    table.read(version=version - 1)  # still readable after a dry run
    purged = table.purge(dry_run=False)
    assert purged.purge_version == version + 1 == table.version
    with pytest.raises(VersionNotFoundError):
        table.read(version=version - 1)
    key = [("region", "ascending"), ("id", "ascending")]
    assert table.read().sort_by(key).equals(rows.sort_by(key))
