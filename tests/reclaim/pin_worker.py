"""A reader process for the pin race: pins a recent version, reads it three times (it must read, and the same),
unpins; over and over, until PINS pins were acknowledged.

Usage: ``python pin_worker.py URI PINS OUT.json [GO]``: with GO, the attempts start once that file exists (the
test creates it when reclamation has run once, so the pins race a reclamation that is under way). Most attempts
lose the race (reclamation, two hours ahead, expires every version but the latest), so the worker goes on until
PINS pins were acknowledged, within 100 attempts per pin wanted and 240 seconds. Writes counts of pins
acknowledged, refused (the version had expired) and lost to a conflict, and every failure of a pinned version to
read the same after its pin.
"""

from __future__ import annotations

import json
import sys
import time
from datetime import timedelta
from pathlib import Path

from maintd import PinConflictError, Table, VersionNotFoundError

sys.path.insert(0, str(next(p for p in Path(__file__).resolve().parents if (p / "waiting.py").exists())))
from waiting import wait_until  # the tests' one way to wait


def main(uri: str, pins: int, out: str, go: str | None = None) -> None:
    if go is not None:
        wait_until(Path(go).exists, f"{go} (the signal to start)", timeout=120)
    counts = {"acknowledged": 0, "refused": 0, "conflicts": 0, "attempts": 0, "unreadable": []}
    deadline = time.monotonic() + 240
    while counts["acknowledged"] < pins and counts["attempts"] < 100 * pins and time.monotonic() < deadline:
        counts["attempts"] += 1
        table = Table.open(uri)
        version = max(0, table.version - 2)  # a version reclamation (running two hours ahead) wants to expire
        try:
            pin = table.pin(version, timedelta(hours=5), "race")  # outlives reclamation's clock (2 h ahead)
        except VersionNotFoundError:
            counts["refused"] += 1
            continue
        except PinConflictError:
            counts["conflicts"] += 1
            continue
        counts["acknowledged"] += 1
        before = None
        for _ in range(3):  # reclamation runs meanwhile; the pinned version must read the same every time
            try:
                again = Table.open(uri).read(version=version).sort_by("id").to_pylist()
            except Exception as exc:  # reported, and the test fails on it
                counts["unreadable"].append(f"{version}: {type(exc).__name__}: {exc}")
                break
            if before is not None and again != before:
                counts["unreadable"].append(f"{version}: rows differ")
                break
            before = again
        Table.open(uri).unpin(pin.id)
    with open(out, "w") as fh:
        json.dump(counts, fh)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4] if len(sys.argv) > 4 else None)
