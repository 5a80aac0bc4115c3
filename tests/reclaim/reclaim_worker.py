"""A process of the reclamation tests.

``python reclaim_worker.py reclaim URI NOW_ISO STEP N``: reclaim ``URI`` at time ``NOW_ISO`` and SIGKILL
this process right after the ``N``-th occurrence of step ``STEP`` (``checkpoint``, ``log``, ``data``,
``orphan``, ``watermark``); ``STEP`` ``none`` runs to the end.

``python reclaim_worker.py write URI COMMITS OUT.parquet OFFSET``: commit ``COMMITS`` batches of upserts
and deletes of keys ``OFFSET`` to ``OFFSET + 199``, then write every committed batch, in order, to
``OUT.parquet`` for the test's model (writers with different offsets touch different keys).

``python reclaim_worker.py write-paused URI DIR``: upsert one row, pausing right before the put-if-absent of
its first commit file: it writes ``DIR/paused`` (the version it is about to publish) and waits for
``DIR/resume``; then prints a JSON line with the version it landed at and how many of its publishes went
into history that reclamation had removed (and were taken back).
"""

from __future__ import annotations

import json
import os
import signal
import sys
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from maintd import Table
from maintd.reclaim import reclaim_table

sys.path.insert(0, str(next(p for p in Path(__file__).resolve().parents if (p / "waiting.py").exists())))
from waiting import wait_until  # the tests' one way to wait


def reclaim(uri: str, now: str, step: str, n: int) -> None:
    seen = 0

    def hook(name: str) -> None:
        nonlocal seen
        if name == step:
            seen += 1
            if seen == n:
                os.kill(os.getpid(), signal.SIGKILL)

    reclaim_table(Table.open(uri), now=datetime.fromisoformat(now), orphan_grace=timedelta(hours=1), on_step=hook)


def write(uri: str, commits: int, out: str, offset: int) -> None:
    table = Table.open(uri)
    rng = np.random.default_rng(7 + offset)
    written = []
    for _ in range(commits):
        keys = offset + rng.integers(0, 200, 20)
        batch = pa.table({"id": pa.array(keys, pa.int64()), "name": [f"n{k}-{rng.integers(9)}" for k in keys],
                          "ds": ["a" if k % 2 else "b" for k in keys],
                          "op": pa.array((rng.random(20) < 0.2).astype(np.int8))})
        table.write_changes(batch, "op")
        written.append(batch)
    pq.write_table(pa.concat_tables(written), out)


def write_paused(uri: str, sync: str) -> None:
    from loguru import logger

    from maintd.storage.local import LocalStorage

    taken_back: list[str] = []
    logger.add(lambda m: taken_back.append(m), filter=lambda r: "published into history" in r["message"])
    publish = LocalStorage.put_if_absent
    paused: list[str] = []

    def put_if_absent(self: LocalStorage, path: str, data: bytes) -> bool:
        if path.startswith("_log/") and path.endswith(".json") and not paused:
            paused.append(path)
            # written whole, then renamed: the test polls for the name and must never read it half-written
            Path(sync, "paused.tmp").write_text(path)
            os.replace(Path(sync, "paused.tmp"), Path(sync, "paused"))
            wait_until(Path(sync, "resume").exists, "the signal to resume", timeout=120)
        return publish(self, path, data)

    LocalStorage.put_if_absent = put_if_absent  # type: ignore[method-assign]
    table = Table.open(uri)
    version = table.upsert(pa.table({"id": [4242], "name": ["paused writer"], "ds": ["a"]}))
    print(json.dumps({"version": version, "paused_at": paused[0], "taken_back": len(taken_back)}), flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "write-paused":
        write_paused(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "reclaim":
        reclaim(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]))
    else:
        write(sys.argv[2], int(sys.argv[3]), sys.argv[4], int(sys.argv[5]))
