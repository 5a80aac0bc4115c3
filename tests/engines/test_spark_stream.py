"""A Structured Streaming query writes a maintd table: one commit per micro-batch, exactly once across a
stop and a restart, while maintenance (what ``maintd run`` does) works on the same table."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from waiting import wait_until

from maintd import Table
from maintd.engines.spark.write import STREAM_APP_PREFIX
from maintd.execution.runner import Runner

from .helpers import Model

pytestmark = [pytest.mark.spark, pytest.mark.slow]

BATCHES = 20
INPUT_SCHEMA = "id long, region string, name string, amount double, day date, op byte"
POLICY = """
default:
  clustering:
    level1: {min_files: 2, trigger_bytes: 1 KiB, max_age_hours: 1}
  compaction: {max_delta_files: 3, min_interval_hours: 0}
"""


def _batches(n: int) -> list[pa.Table]:
    rng = np.random.default_rng(11)
    out = []
    for _ in range(n):
        ids = rng.integers(0, 300, 60)
        out.append(pa.table({
            "id": pa.array(ids, pa.int64()), "region": ["eu"] * 60, "name": [f"n{i}" for i in ids],
            "amount": rng.random(60), "day": pa.array([None] * 60, pa.date32()),
            "op": pa.array((rng.random(60) < 0.25).astype(np.int8))}))
    return out


class Stream:
    """The input directory (one Parquet file per micro-batch, in order) and the query writing the table."""

    def __init__(self, spark: Any, root: Path, table: Table) -> None:
        self.spark, self.table = spark, table
        self.input, self.checkpoint = root / "input", root / "checkpoint"
        self.input.mkdir()
        self.batches = _batches(BATCHES)
        self.app_id: str | None = None

    def put(self, i: int) -> None:
        tmp = self.input / f".b{i:02d}.tmp"
        pq.write_table(self.batches[i], tmp)
        os.utime(tmp, (1_700_000_000 + i, 1_700_000_000 + i))  # the file source takes files oldest first
        tmp.rename(self.input / f"b{i:02d}.parquet")

    def start(self) -> Any:
        q = (self.spark.readStream.schema(INPUT_SCHEMA).option("maxFilesPerTrigger", 1).parquet(str(self.input))
             .writeStream.format("maintd").option("checkpointLocation", str(self.checkpoint))
             .option("opColumn", "op").start(self.table.uri))
        self.app_id = f"{STREAM_APP_PREFIX}{q.id}"
        return q

    def wait_for(self, q: Any, batch: int, timeout: float = 300) -> None:
        """Until the table holds micro-batch ``batch`` (the query's commits are the events waited on)."""

        def committed() -> bool:
            if q.exception() is not None:
                raise AssertionError(f"the query failed: {q.exception()}")
            return self.table.snapshot().app_txns.get(self.app_id or "", -1) >= batch

        wait_until(committed, f"micro-batch {batch} to be committed", timeout=timeout, poll=0.2)


def _streamed(table: Table, app_id: str) -> list[int]:
    """The micro-batch ids of the streaming commits in the log, oldest first."""
    return [c.parameters["batch_id"] for c in reversed(table.history())
            if c.operation == "STREAMING UPDATE" and c.parameters.get("app_id") == app_id]


def test_a_streaming_query_commits_every_micro_batch_once_across_a_restart_while_maintenance_runs(
        spark: Any, tmp_path: Path) -> None:
    table = Table.create(str(tmp_path / "events"), "id:int64!,region:string!,name:string,amount:float64,day:date",
                         primary_key="id", buckets=2)
    stream = Stream(spark, tmp_path, table)
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    runner = Runner(spark=spark, policy_path=policy, reclaim=True)

    q = stream.start()
    first_id = q.id
    try:
        for i in range(10):
            stream.put(i)
            stream.wait_for(q, i)
    finally:
        q.stop()
    # As if the driver died after the table commit of batch 9 but before Spark logged it: Spark runs it again.
    done = stream.checkpoint / "commits" / "9"
    if done.exists():
        done.unlink()
    shutil.rmtree(stream.checkpoint / "commits" / ".9.crc", ignore_errors=True)
    (stream.checkpoint / "commits" / ".9.crc").unlink(missing_ok=True)

    q = stream.start()
    maintained = []
    try:
        assert q.id == first_id  # a restarted query keeps its id, so its commits keep their app id
        for i in range(10, BATCHES):
            stream.put(i)
            stream.wait_for(q, i)
            if i % 3 == 0:  # maintenance between (and alongside) micro-batches of the running query
                summary = runner.run_table(table.uri)
                assert summary.ok, summary.error
                maintained.append(summary.version)
        assert q.isActive
    finally:
        q.stop()

    assert _streamed(table, stream.app_id or "") == list(range(BATCHES))  # no duplicate, none lost
    model = Model()
    for b in stream.batches:
        model.apply(b)
    expected = model.table().cast(table.read().schema)
    assert table.read().sort_by("id").equals(expected)
    ops = [c.operation for c in reversed(table.history())]
    assert "OPTIMIZE" in ops[ops.index("STREAMING UPDATE"):] and any(v is not None for v in maintained)
    snap = table.snapshot()
    on_disk = {f.path for f in table.storage.walk() if f.path.endswith(".parquet") and not f.path.startswith("_log")}
    assert on_disk <= set(snap.files) | set(snap.tombstones)  # the files of the batch run twice were deleted
    assert spark.read.format("maintd").load(table.uri).count() == expected.num_rows
