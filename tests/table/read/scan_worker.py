"""Reads a table in a fresh process and prints the peak of Arrow's memory pool (JSON).

    python scan_worker.py URI stream|read [SPLIT_BYTES]
"""

from __future__ import annotations

import json
import sys

import pyarrow as pa

from maintd import Table


def main() -> None:
    uri, mode = sys.argv[1], sys.argv[2]
    table = Table.open(uri)
    pool = pa.default_memory_pool()
    rows = checksum = 0
    if mode == "stream":
        split = int(sys.argv[3]) if len(sys.argv) > 3 else None
        for b in table.to_batches(split_bytes=split):
            rows += b.num_rows
            checksum += sum(b.column("id").to_pylist())
    else:
        t = table.read()
        rows, checksum = t.num_rows, sum(t.column("id").to_pylist())
    print(json.dumps({"peak": pool.max_memory(), "rows": rows, "checksum": checksum}))


if __name__ == "__main__":
    main()
