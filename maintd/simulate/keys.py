"""What the size estimator measures on the table's data files: per-file overhead and key overlap.

Both are small reads. The overhead is the Parquet footer (and the two magic numbers) of the newest file of each
layout. The key overlap is measured only when the log shows no compaction to learn it from (a table maintd has
not maintained yet, or not compacted lately). The primary-key columns of a sample of buckets are read, bounded
by a byte budget, and every upsert row version of their DeltaFiles is checked against the keys live before it.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pyarrow.parquet as pq

from maintd.simulate.sizes import LAYOUTS, layout
from maintd.table import Snapshot, Table
from maintd.table.files.bucketing import key_hash
from maintd.table.files.datafiles import read_data_file
from maintd.table.files.schema import OP_COLUMN, OP_DELETE, VERSION_COLUMN
from maintd.table.log.actions import AddFile

SAMPLE_BYTES = 64 * 1024 * 1024
"""Most data-file bytes whose key columns the key-overlap sample reads."""
PARQUET_MAGIC_BYTES = 8
"""``PAR1`` at the start and the end of every Parquet file, besides the footer."""


def measure_overheads(table: Table, files: Iterable[AddFile], *, tries: int = 3) -> dict[str, int]:
    """The fixed bytes of one file of each layout (footer + magic), read from the newest readable such file.

    Up to ``tries`` files per layout are tried, newest first (a recently replaced file may be reclaimed
    already); a layout with no readable file is left out.
    """
    out: dict[str, int] = {}
    tried: dict[str, int] = dict.fromkeys(LAYOUTS, 0)
    for f in sorted(files, key=lambda f: (f.max_version, f.path), reverse=True):
        k = layout(f)
        if k in out or tried[k] >= tries:
            continue
        tried[k] += 1
        try:
            md = pq.read_metadata(table.storage.full_path(f.path), filesystem=table.storage.filesystem)
        except (OSError, ValueError):
            continue
        out[k] = int(md.serialized_size) + PARQUET_MAGIC_BYTES
    return out


def _keys(table: Table, snapshot: Snapshot, f: AddFile) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(key hashes, row versions, delete flags) of one file."""
    pk = list(snapshot.metadata.primary_key)
    t = read_data_file(table.storage, snapshot.metadata, f, columns=pk)
    h = key_hash([t.column(c) for c in pk])
    versions = np.asarray(t.column(VERSION_COLUMN).to_numpy(zero_copy_only=False), dtype=np.int64)
    deletes = np.asarray(t.column(OP_COLUMN).to_numpy(zero_copy_only=False)) == OP_DELETE
    return h, versions, deletes


def _bucket_overlap(table: Table, snapshot: Snapshot, files: list[AddFile]) -> tuple[int, int]:
    """(upsert rows of the DeltaFiles whose key was live before them, all their upsert rows).

    Every row version of the bucket's DeltaFiles is ordered by (key, version): a row replaced a live key if
    the row before it holds the same key as an upsert, or, for a key's first row, if the BaseFile holds it.
    """
    bases = [f for f in files if f.kind == "base"]
    deltas = [f for f in files if f.kind == "delta"]
    if not deltas:
        return 0, 0
    live = np.unique(np.concatenate([_keys(table, snapshot, f)[0] for f in bases])) if bases else np.zeros(0, np.uint64)
    parts = [_keys(table, snapshot, f) for f in deltas]
    h = np.concatenate([p[0] for p in parts])
    v = np.concatenate([p[1] for p in parts])
    dead = np.concatenate([p[2] for p in parts])
    order = np.lexsort((v, h))
    h, dead = h[order], dead[order]
    same = np.zeros(len(h), dtype=bool)
    same[1:] = h[1:] == h[:-1]
    after_upsert = np.zeros(len(h), dtype=bool)
    after_upsert[1:] = ~dead[:-1]
    hit = np.where(same, after_upsert, np.isin(h, live))
    upserts = ~dead
    return int((hit & upserts).sum()), int(upserts.sum())


def sample_key_overlap(table: Table, snapshot: Snapshot, *, budget_bytes: int = SAMPLE_BYTES) -> float | None:
    """The share of upsert rows that replaced a live key, over a sample of buckets; None if nothing to sample.

    Buckets with the most DeltaFiles are read first, until ``budget_bytes`` of files were read.
    """
    groups = snapshot.by_bucket()
    order = sorted(groups, key=lambda k: -sum(1 for f in groups[k] if f.kind == "delta"))
    hits = total = used = 0
    for key in order:
        files = groups[key]
        if not any(f.kind == "delta" for f in files):
            break
        cost = sum(f.bytes for f in files)
        if total and used + cost > budget_bytes:
            break
        h, n = _bucket_overlap(table, snapshot, files)
        hits, total, used = hits + h, total + n, used + cost
    return hits / total if total else None


__all__ = ["PARQUET_MAGIC_BYTES", "SAMPLE_BYTES", "measure_overheads", "sample_key_overlap"]
