"""Time ``maintd tune`` on a week for a table with a realistic write pattern (docs/benchmarks.md).

The table: 8 buckets, a commit every 5 minutes for 24 hours (300 new keys and 200 updates of older keys each),
written under frozen time so the learning window holds the whole day. Each sample runs the command in a new
process: ``maintd tune URI --target read_files_per_bucket=12 --target merge_delay_minutes=30 --days 7 --json``,
and prints whether the search completed within its budget, how many policies it simulated and whether the
chosen one meets the targets, beside the wall time and the load average.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.acero  # imported before freezegun swaps datetime.date
from freezegun import freeze_time

from maintd.table import Table


def make_table(uri: str) -> None:
    rng = np.random.default_rng(1)
    with freeze_time(datetime.now(UTC) - timedelta(hours=25)) as clock:
        t = Table.create(uri, "id:int64!,v:string,amount:double", primary_key="id", buckets=8)
        nxt = 0
        for _ in range(288):
            clock.tick(timedelta(minutes=5))
            new = np.arange(nxt, nxt + 300)
            nxt += 300
            ids = np.concatenate([new, rng.integers(0, max(1, nxt - 300), 200)])
            t.upsert(pa.table({"id": ids, "v": [f"value-{x % 997}" for x in ids], "amount": rng.random(len(ids))}))


def main(samples: int = 3) -> None:
    uri = str(Path(tempfile.mkdtemp()) / "t8")
    make_table(uri)
    cmd = [sys.executable, "-m", "maintd", "tune", uri, "--target", "read_files_per_bucket=12",
           "--target", "merge_delay_minutes=30", "--days", "7", "--json", *sys.argv[1:]]
    times = []
    for _ in range(samples):
        load = os.getloadavg()[0]
        t0 = time.monotonic()
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        times.append(time.monotonic() - t0)
        doc = json.loads(out)
        print(f"{times[-1]:.1f} s (load {load:.1f}): complete={doc['complete']} evaluated={doc['evaluated']} "
              f"meets={doc['meets']} predicted={doc['tuned']['predicted']}", flush=True)
    print(f"samples {[round(t, 1) for t in times]} s; median {statistics.median(times):.1f} s, "
          f"spread {min(times):.1f} to {max(times):.1f} s; load average {os.getloadavg()}")


if __name__ == "__main__":
    main()
