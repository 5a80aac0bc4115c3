"""A writer of an S3 table without conditional put, committing through the state store's commit records.

``python commit_record_worker.py URI OPTIONS_JSON STORE_URL DB_SCHEMA ROW STOP_FILE``: upserts row ``ROW`` and
prints the version it landed at. With ``STOP_FILE`` (not ``-``) the process stops itself (SIGSTOP) right before
it writes its commit file, after it checked (and, under commit records, claimed) the version, and first writes
``STOP_FILE``: the holder stalled between its check and its write, for as long as the test wants.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import pyarrow as pa

from maintd import Table
from maintd.service.commit_lock import install
from maintd.service.store import StateStore
from maintd.storage import configure_storage
from maintd.storage.objectstore import ObjectStoreStorage


def main() -> None:
    uri, options, url, db_schema, row, stop_file = sys.argv[1:7]
    configure_storage(uri, json.loads(options))
    store = StateStore(url, db_schema=None if db_schema == "-" else db_schema)
    install(store)
    if stop_file != "-":
        real = ObjectStoreStorage.write_atomic

        def stalls(self: ObjectStoreStorage, path: str, data: bytes) -> None:
            if path.startswith("_log/") and path.endswith(".json") and not Path(stop_file).exists():
                Path(stop_file).write_text(str(os.getpid()))
                os.kill(os.getpid(), signal.SIGSTOP)  # a GC pause, a partition: as long as the test wants
            real(self, path, data)

        ObjectStoreStorage.write_atomic = stalls  # type: ignore[method-assign]
    version = Table.open(uri).upsert(pa.table({"id": [int(row)], "w": [int(row)]}))
    print(version, flush=True)


if __name__ == "__main__":
    main()
