"""A process of the reclamation tests.

``python reclaim_worker.py reclaim URI NOW_ISO STEP N``: reclaim ``URI`` at time ``NOW_ISO`` and SIGKILL
this process right after the ``N``-th occurrence of step ``STEP`` (``checkpoint``, ``log``, ``data``,
``orphan``, ``watermark``); ``STEP`` ``none`` runs to the end.

``python reclaim_worker.py write URI COMMITS OUT.parquet OFFSET``: commit ``COMMITS`` batches of upserts
and deletes of keys ``OFFSET`` to ``OFFSET + 199``, then write every committed batch, in order, to
``OUT.parquet`` for the test's model (writers with different offsets touch different keys).
"""

from __future__ import annotations

import os
import signal
import sys
from datetime import datetime, timedelta

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from maintd import Table
from maintd.reclaim import reclaim_table


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


if __name__ == "__main__":
    if sys.argv[1] == "reclaim":
        reclaim(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]))
    else:
        write(sys.argv[2], int(sys.argv[3]), sys.argv[4], int(sys.argv[5]))
