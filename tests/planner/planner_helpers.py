"""Hand-made snapshots for planner tests: files are built directly, no storage involved."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any

from maintd.planner import Policy, default_policy, with_overrides
from maintd.table.log.actions import AddFile, Field_, Metadata, Protocol
from maintd.table.log.snapshot import Snapshot

NOW = datetime(2024, 6, 1, 12, 0, tzinfo=UTC)
NOW_MS = int(NOW.timestamp() * 1000)
HOUR = 3_600_000
MiB = 1024 * 1024


def ms_ago(hours: float) -> int:
    return NOW_MS - int(hours * HOUR)


def delta(version: int, *, level: int = 0, size: int = MiB, bucket: int = 0, age_h: float = 0.1,
          span_h: float = 0.0, max_version: int | None = None, rows: int = 100, deletes: int = 0,
          part: str | None = None) -> AddFile:
    """A DeltaFile covering versions [version, max_version] committed ``age_h`` hours ago."""
    t = ms_ago(age_h)
    return AddFile(path=f"p{part}/b{bucket}/d-{version:06d}-{max_version or version}-L{level}.parquet",
                   partition={"ds": part} if part else {}, bucket=bucket, kind="delta", level=level, rows=rows,
                   bytes=size, min_version=version, max_version=max_version or version,
                   min_commit_time=t - int(span_h * HOUR), max_commit_time=t, delete_rows=deletes,
                   modification_time=t)


def base(max_version: int, *, size: int = 100 * MiB, bucket: int = 0, compacted_h: float = 2.0,
         rows: int = 10_000, part: str | None = None) -> AddFile:
    t = ms_ago(compacted_h)
    return AddFile(path=f"p{part}/b{bucket}/base-{max_version:06d}.parquet", partition={"ds": part} if part else {},
                   bucket=bucket, kind="base", level=None, rows=rows, bytes=size, min_version=0,
                   max_version=max_version, min_commit_time=t - 10 * HOUR, max_commit_time=t - HOUR,
                   modification_time=t)


def snapshot(files: Iterable[AddFile], *, version: int = 1000, retain_hours: int = 24, partitioned: bool = False,
             properties: dict[str, str] | None = None) -> Snapshot:
    props = {"acid.data.retain.hours": str(retain_hours), **(properties or {})}
    cols = (Field_(name="id", type="int64"), Field_(name="ds", type="string"))
    md = Metadata(table_id="t1", name="db.t", fields=cols,
                  primary_key=("id",), partition_by=("ds",) if partitioned else (), buckets=16, properties=props,
                  created_time=0)
    return Snapshot(version=version, timestamp=NOW_MS, protocol=Protocol(), metadata=md,
                    files=MappingProxyType({f.path: f for f in files}))


def policy(**sections: dict[str, Any]) -> Policy:
    """The default policy with nested overrides, e.g. ``policy(clustering={"level1": {"min_files": 3}})``."""
    return with_overrides(default_policy(), sections) if sections else default_policy()
