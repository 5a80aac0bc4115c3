"""A local worker process (``python -m maintd.execution.worker``), started by :mod:`maintd.execution.processes`.

It imports what a unit imports (:func:`maintd.execution.spark.preload_worker`), writes ``ready``, then reads
one JSON request per line on stdin: ``{"pack": [spec JSON, ...], "threads": N, "attempt": A, "uri": ...,
"options": {...}}`` (``uri`` and ``options``: the table's storage as carried to a Spark task, or null for a
local table; ``attempt``: 0, or 1 when the pack runs again after a worker died), runs
the pack as a Spark task does (:func:`maintd.execution.spark.run_pack_in_worker`: it never raises for a
unit; a failed unit is a result with ``ok=false``) and writes the results as one JSON list on one line of
stdout. It exits when stdin closes. Anything a unit prints goes to stderr, never into the answers.
"""

from __future__ import annotations

import json
import sys


def main() -> int:
    answers = sys.stdout.buffer
    sys.stdout = sys.stderr  # a print in a unit (or a library) must not corrupt the protocol
    from maintd.execution.spark import preload_worker, run_pack_in_worker
    from maintd.storage.options import CarriedStorage, StorageOptions

    preload_worker()
    answers.write(b"ready\n")
    answers.flush()
    for line in sys.stdin.buffer:
        request = json.loads(line)
        uri = request.get("uri")
        storage = CarriedStorage(uri, StorageOptions.of(request.get("options") or {})) if uri else None
        results = run_pack_in_worker(request["pack"], threads=int(request.get("threads") or 1), freeze=False,
                                     storage=storage, attempt=int(request.get("attempt") or 0))
        answers.write(json.dumps(results).encode() + b"\n")
        answers.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
