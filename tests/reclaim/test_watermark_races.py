"""The reclamation watermark and the checkpoint hint only move forward, under concurrent writers.

Each was read, compared and written back in three steps: a reclamation that read the watermark before another
one advanced it wrote its older value over the newer one (a lost update), and so could two writers of
checkpoints with ``_last_checkpoint``. Each is now one atomic update (``Storage.update_atomic``).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pyarrow as pa

from maintd import Table
from maintd.storage import LocalStorage
from maintd.table.log.tablelog import LAST_CHECKPOINT, RECLAIMED, TableLog

STALL_SECONDS = 0.4
"""How long a slow storage stalls after its read (an injected delay): the fast call runs meanwhile."""


class SlowReads(LocalStorage):
    """Stalls right after reading ``path``: the read value is old by the time it is written back. ``stalled``
    is set once it has read and begun to stall."""

    def __init__(self, uri: str, path: str) -> None:
        super().__init__(uri)
        self.path = path
        self.stalled = threading.Event()

    def read(self, path: str) -> bytes:
        data = super().read(path)
        if path == self.path:
            self.stalled.set()
            time.sleep(STALL_SECONDS)
        return data


def race(slow: SlowReads, slow_call: object, fast_call: object) -> None:
    first = threading.Thread(target=slow_call)  # type: ignore[arg-type]
    first.start()
    assert slow.stalled.wait(60), "the slow call never read"  # it has read the old value and stalls
    fast_call()  # type: ignore[operator]
    first.join()


def test_a_reclamation_that_read_an_older_watermark_never_writes_it_back(tmp_path: Path) -> None:
    root = tmp_path / "t"
    table = Table.create(str(root), "id:int64!", primary_key="id", buckets=1)
    table.log.advance_reclaimed_watermark(2, 200)
    storage = SlowReads(str(root), RECLAIMED)
    slow = TableLog(storage)
    race(storage, lambda: slow.advance_reclaimed_watermark(5, 500),
         lambda: TableLog(LocalStorage(str(root))).advance_reclaimed_watermark(9, 900))
    assert (table.log.reclaimed_version(), table.log.reclaimed_watermark()) == (9, 900)


def test_a_writer_of_an_older_checkpoint_never_moves_the_hint_back(tmp_path: Path) -> None:
    root = tmp_path / "t"
    table = Table.create(str(root), "id:int64!", primary_key="id", buckets=1,
                         properties={"log.checkpoint.interval": 1000})
    for i in range(20):
        table.upsert(pa.table({"id": [i]}))
    older, newer = table.snapshot(10), table.snapshot(20)
    storage = SlowReads(str(root), LAST_CHECKPOINT)
    slow = TableLog(storage)
    table.log.write_checkpoint(table.snapshot(5))  # a hint both writers read as older than theirs
    race(storage, lambda: slow.write_checkpoint(older),
         lambda: TableLog(LocalStorage(str(root))).write_checkpoint(newer))
    assert table.log.last_checkpoint_hint() == 20
