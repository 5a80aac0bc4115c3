"""A writer in its own process: commits upserts to a table while maintenance runs (used by test_spark)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from maintd import Table


def main(uri: str, commits: int, seed: int, out: str) -> None:
    table = Table.open(uri)
    rng = np.random.default_rng(seed)
    written = []
    for _ in range(commits):
        k = rng.integers(0, 600, 100)
        b = pa.table({"id": pa.array(k, pa.int64()), "name": [f"w{x}" for x in k], "amount": rng.random(100),
                      "tier": pa.array(np.array(["gold", "silver"])[k % 2]),
                      "op": pa.array((rng.random(100) < 0.2).astype(np.int8))})
        table.write_changes(b, "op")
        written.append(b)
    pq.write_table(pa.concat_tables(written), Path(out))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
