"""Merge-on-read of a bucket of many level-0 files, whose runs of files are settled on the threads that read them,
against the writes made (the kernel that keeps the newest row of each key is in tests/table/files/test_merge.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from maintd import Table
from maintd.table.files.schema import OP_COLUMN, OP_UPSERT, VERSION_COLUMN
from maintd.table.read import reader


@pytest.mark.parametrize("threads", [1, 2, 3, 4])
def test_a_bucket_of_many_level0_files_reads_as_the_writes_made_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                    threads: int) -> None:
    """Runs of files read on threads each keep their newest row per key, deletes included: a delete in a newer
    run hides a row of an older run, a row rewritten in a newer run wins, and the runs' boundaries fall
    between versions of one key."""
    monkeypatch.setattr(reader, "_THREADS", threads)
    table = Table.create(str(tmp_path / "t"), "id:int64!,name:string,n:int32", primary_key="id", buckets=1)
    rng = np.random.default_rng(11)
    live: dict[int, tuple[str, int, int]] = {}
    for i in range(19):  # more than _PARALLEL_FILES, so the reader goes to threads
        keys = np.unique(rng.integers(0, 40, 12))
        ops = rng.random(len(keys)) < 0.3
        if i == 18:  # the newest file deletes keys an old run wrote, and rewrites others
            keys, ops = np.array([0, 1, 2, 3]), np.array([True, True, False, False])
        data = pa.table({"id": pa.array(keys, pa.int64()), "name": [f"n{i}-{k}" for k in keys],
                         "n": pa.array(np.full(len(keys), i), pa.int32()), "op": pa.array(ops.astype(np.int8))})
        version = table.write_changes(data, "op")
        for k, d in zip(keys.tolist(), ops.tolist(), strict=True):
            if d:
                live.pop(k, None)
            else:
                live[k] = (f"n{i}-{k}", i, version)
    files = table.snapshot().files.values()
    assert len(files) == 19 and all(f.level == 0 for f in files) and sum(f.delete_rows for f in files) > 0
    got = reader.read_snapshot(table.storage, table.snapshot(), keep_hidden=True)
    assert got.column("id").to_pylist() == sorted(live)
    assert got.column("name").to_pylist() == [live[k][0] for k in sorted(live)]
    assert got.column("n").to_pylist() == [live[k][1] for k in sorted(live)]
    assert got.column(VERSION_COLUMN).to_pylist() == [live[k][2] for k in sorted(live)]
    assert set(got.column(OP_COLUMN).to_pylist()) == {OP_UPSERT}
    assert table.read(columns=["n"]).column("n").to_pylist() == [live[k][1] for k in sorted(live)]
