"""Reclamation, orphans and PURGE on S3 (a moto server started by the tests).

Files are found by listing the bucket below the table; an orphan's grace is measured on the object's
last-modified time as the store reports it; PURGE through the CLI reaches the store through the standard
AWS environment.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from freezegun import freeze_time
from reclaim_helpers import T0, build, rows
from typer.testing import CliRunner

from maintd import Table, VersionNotFoundError
from maintd.cli import app
from maintd.reclaim import purge_table, reclaim_table
from maintd.storage import storage_for_uri

HOUR = timedelta(hours=1)
ORPHAN = "ds=a/bucket-00000/delta-L0-" + "b" * 32 + ".parquet"


def data_files(uri: str) -> set[str]:
    return {f.path for f in storage_for_uri(uri).walk()
            if f.path.endswith(".parquet") and not f.path.startswith("_log/")}


def test_reclamation_expires_history_and_deletes_only_unneeded_objects(s3_root: str) -> None:
    uri = f"{s3_root}/wh/t"
    history = build(uri, [HOUR] * 10, retain_hours=3, interval=4)  # type: ignore[arg-type]
    table = Table.open(uri)
    before = data_files(uri)
    report = reclaim_table(table, now=T0 + 11 * HOUR)
    assert report.data_files_deleted > 0
    table = Table.open(uri)
    oldest = table.log.oldest_reconstructible_version()
    assert oldest > 0
    with freeze_time(T0 + 11 * HOUR):
        with pytest.raises(VersionNotFoundError):
            table.read(version=oldest - 1)
        for v in range(oldest, history.latest + 1):
            assert rows(table.read(version=v)) == history.reads[v]
    after = data_files(uri)
    assert after < before and after == history.live_from(oldest)


def test_orphan_grace_is_measured_on_the_objects_last_modified_time(s3_root: str) -> None:
    uri = f"{s3_root}/wh/orphans"
    build(uri, [HOUR] * 3, retain_hours=168)  # type: ignore[arg-type]
    storage = storage_for_uri(uri)
    storage.put_if_absent(ORPHAN, b"PAR1 left by a writer that crashed before its commit")
    modified = next(f.mtime_ms for f in storage.walk() if f.path == ORPHAN)
    assert abs(modified / 1000 - datetime.now(UTC).timestamp()) < 300
    now = datetime.now(UTC)
    kept = reclaim_table(Table.open(uri), now=now, orphan_grace=HOUR)
    assert storage.exists(ORPHAN) and kept.orphan_files_deleted == 0, "a fresh object is within its grace"
    later = reclaim_table(Table.open(uri), now=now + 2 * HOUR, orphan_grace=HOUR)
    assert not storage.exists(ORPHAN) and later.orphan_files_deleted == 1


def test_purge_on_s3_keeps_only_the_current_version(s3_root: str) -> None:
    uri = f"{s3_root}/wh/purged"
    history = build(uri, [HOUR] * 8, retain_hours=168)  # type: ignore[arg-type]
    report = purge_table(Table.open(uri), now=datetime.now(UTC))
    table = Table.open(uri)
    assert report.purge_version == history.latest + 1 == table.version
    assert rows(table.read()) == history.reads[history.latest]
    assert data_files(uri) == set(table.snapshot().files)
    with pytest.raises(VersionNotFoundError):
        table.read(version=history.latest - 1)


def test_purge_and_gc_commands_on_s3_through_the_aws_environment(s3_root: str, s3_server: Any,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    uri = f"{s3_root}/wh/cli"
    history = build(uri, [HOUR] * 6, retain_hours=168)  # type: ignore[arg-type]
    from maintd.storage import clear_storage_options

    clear_storage_options()  # from here on only the environment says where the store is
    for k, v in s3_server.env.items():
        monkeypatch.setenv(k, v)
    runner = CliRunner()
    result = runner.invoke(app, ["purge", uri, "--yes"])
    assert result.exit_code == 0, result.output
    assert Table.open(uri).version == history.latest + 1
    gc = runner.invoke(app, ["gc", uri, "--dry-run"])
    assert gc.exit_code == 0, gc.output
    assert s3_server.options["aws_secret_access_key"] not in result.output + gc.output


def test_data_files_and_orphans_go_in_bulk_deletes_without_a_look_first(s3_root: str, s3_server: Any) -> None:
    """Object stores delete up to 1,000 keys per request: a reclamation's data files go in one ``DeleteObjects``,
    not a HEAD and a DELETE per file; its commits one request each (oldest first), without a HEAD either."""
    uri = f"{s3_root}/t"
    bucket = s3_root[len("s3://"):]
    table = Table.create(uri, "id:int64!,v:string", primary_key="id", buckets=4,
                         properties={"acid.data.retain.hours": 0})
    import pyarrow as pa

    for i in range(6):
        table.upsert(pa.Table.from_pylist([{"id": k, "v": f"{i}"} for k in range(8)]))  # 4 files a commit
    table.overwrite(pa.Table.from_pylist([{"id": 0, "v": "last"}]))  # every earlier file becomes a tombstone
    tombstones = len(table.snapshot().tombstones)
    before = len(s3_server.requests(bucket))
    report = reclaim_table(Table.open(uri), now=datetime.now(UTC) + HOUR)
    lines = s3_server.requests(bucket)[before:]
    assert report.data_files_deleted == tombstones >= 24 and report.complete
    bulk = [line for line in lines if line.startswith("POST") and "delete" in line.split(" ")[1]]
    looks = [line for line in lines if line.startswith("HEAD") and ".parquet" in line and "/_log/" not in line]
    assert report.log_files_deleted == 7 and not looks, lines  # commits 0..6 (no checkpoint below 7)
    assert len(bulk) == 1 + report.log_files_deleted and not any(line.startswith("DELETE") for line in lines)
    assert Table.open(uri).read().to_pylist() == [{"id": 0, "v": "last"}]
