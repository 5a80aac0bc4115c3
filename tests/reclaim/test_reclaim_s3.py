"""What only reclamation on S3 does (a moto server started by the tests): data files and commits deleted in bulk,
without a look first.

Reclamation, orphans and PURGE on S3 (as on local disk and Azure) are in test_reclaim_stores.py.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from maintd import Table
from maintd.reclaim import reclaim_table

HOUR = timedelta(hours=1)


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
