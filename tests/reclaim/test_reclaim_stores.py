"""Reclamation, orphans and PURGE on every store: local disk, S3 (a moto server) and Azure Blob Storage (Azurite).

Files are found by listing the store below the table; an orphan's grace is measured on the file's last-modified
time as the store reports it; PURGE and ``gc`` through the CLI reach an object store through the standard
environment alone. S3's bulk deletes are in test_reclaim_s3.py.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from freezegun import freeze_time
from reclaim_helpers import T0, build, rows
from stores import TableStore
from typer.testing import CliRunner

from maintd import Table, VersionNotFoundError
from maintd.cli import app
from maintd.reclaim import purge_table, reclaim_table
from maintd.storage import clear_storage_options, storage_for_uri

HOUR = timedelta(hours=1)
ORPHAN = "ds=a/bucket-00000/delta-L0-" + "b" * 32 + ".parquet"


def data_files(uri: str) -> set[str]:
    return {f.path for f in storage_for_uri(uri).walk()
            if f.path.endswith(".parquet") and not f.path.startswith("_log/")}


def test_reclamation_expires_history_and_deletes_only_unneeded_files(table_store: TableStore) -> None:
    uri = f"{table_store.root}/wh/t"
    history = build(uri, [HOUR] * 10, retain_hours=3, interval=4)  # type: ignore[arg-type]
    table = Table.open(uri)
    before = data_files(uri)
    report = reclaim_table(table, now=T0 + 11 * HOUR)
    assert report.data_files_deleted > 0
    table = Table.open(uri)
    oldest = table.log.oldest_reconstructible_version()
    assert oldest > 0
    assert rows(table.read()) == history.reads[history.latest]
    with freeze_time(T0 + 11 * HOUR):
        with pytest.raises(VersionNotFoundError):
            table.read(version=oldest - 1)
        for v in range(oldest, history.latest + 1):
            assert rows(table.read(version=v)) == history.reads[v]
    after = data_files(uri)
    assert after < before and after == history.live_from(oldest)


def test_orphan_grace_is_measured_on_the_files_last_modified_time(table_store: TableStore) -> None:
    uri = f"{table_store.root}/wh/orphans"
    build(uri, [HOUR] * 3, retain_hours=168)  # type: ignore[arg-type]
    storage = storage_for_uri(uri)
    storage.put_if_absent(ORPHAN, b"PAR1 left by a writer that crashed before its commit")
    modified = next(f.mtime_ms for f in storage.walk() if f.path == ORPHAN)
    assert abs(modified / 1000 - datetime.now(UTC).timestamp()) < 300, "last-modified as the store reports it"
    now = datetime.now(UTC)
    kept = reclaim_table(Table.open(uri), now=now, orphan_grace=HOUR)
    assert storage.exists(ORPHAN) and kept.orphan_files_deleted == 0, "a fresh file is within its grace"
    later = reclaim_table(Table.open(uri), now=now + 2 * HOUR, orphan_grace=HOUR)
    assert not storage.exists(ORPHAN) and later.orphan_files_deleted == 1


def test_purge_keeps_only_the_current_version(table_store: TableStore) -> None:
    uri = f"{table_store.root}/wh/purged"
    history = build(uri, [HOUR] * 8, retain_hours=168)  # type: ignore[arg-type]
    report = purge_table(Table.open(uri), now=datetime.now(UTC))
    table = Table.open(uri)
    assert report.purge_version == history.latest + 1 == table.version
    assert rows(table.read()) == history.reads[history.latest]
    assert data_files(uri) == set(table.snapshot().files)
    with pytest.raises(VersionNotFoundError):
        table.read(version=history.latest - 1)


@pytest.mark.stores("s3", "azure")
def test_purge_and_gc_commands_reach_the_store_through_the_standard_environment(
        table_store: TableStore, monkeypatch: pytest.MonkeyPatch) -> None:
    uri = f"{table_store.root}/wh/cli"
    history = build(uri, [HOUR] * 6, retain_hours=168)  # type: ignore[arg-type]
    clear_storage_options()  # from here on only the environment says where the store is
    for k, v in table_store.env.items():
        monkeypatch.setenv(k, v)
    runner = CliRunner()
    result = runner.invoke(app, ["purge", uri, "--yes"])
    assert result.exit_code == 0, result.output
    table = Table.open(uri)
    assert table.version == history.latest + 1 and table.log.oldest_reconstructible_version() == table.version
    assert rows(table.read()) == history.reads[history.latest]
    gc = runner.invoke(app, ["gc", uri, "--dry-run"])
    assert gc.exit_code == 0, gc.output
    assert table_store.secret and table_store.secret not in result.output + gc.output
