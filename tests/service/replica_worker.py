"""A real daemon loop in its own process whose tables never change, for the tests of replicas sharing tables.

Usage: ``python replica_worker.py URL SCHEMA|- HOLDER TABLES``

It runs :class:`~maintd.service.daemon.Daemon` as ``maintd daemon`` does (scheduler, replica rows, leases,
checks written onto the tables' rows) on ``TABLES`` fake table URIs whose stand-in check says a table must
be planned only the first time this process sees it, and whose stand-in maintenance finds nothing to do. It
prints ``ready`` once started and exits 0 after SIGTERM.
"""

from __future__ import annotations

import sys
import threading

from loguru import logger

from maintd.service.daemon import Daemon
from maintd.service.records import RunResult, RunStatus
from maintd.service.store import StateStore
from maintd.settings import Settings

INTERVAL, LEASE, RENEW = 2.0, 10.0, 2.0


def main(argv: list[str]) -> int:
    url, schema, holder, n_tables = argv
    logger.remove()  # a check per table per second at DEBUG is not what the test reads
    logger.add(sys.stderr, level="INFO")
    settings = Settings.model_validate({
        "warehouse": {"tables": [f"/wh/t{i:03d}" for i in range(int(n_tables))], "discovery": False},
        "scheduler": {"maintenance_interval_seconds": INTERVAL, "reclamation_interval_seconds": 3600,
                      "jitter_seconds": 0, "max_concurrent_tables": 2, "shutdown_grace_seconds": 5},
        "store": {"url": url, "db_schema": None if schema == "-" else schema, "lease_duration_seconds": LEASE,
                  "lease_renew_interval_seconds": RENEW},
    })
    store = StateStore(url, db_schema=settings.store.db_schema)
    planned: set[str] = set()
    lock = threading.Lock()

    def check(uri: str) -> bool:
        with lock:
            return uri not in planned

    def maintain(uri: str) -> RunResult:
        with lock:
            planned.add(uri)
        return RunResult(status=RunStatus.SKIPPED)

    daemon = Daemon(settings, store, maintain, lambda uri: RunResult(status=RunStatus.SKIPPED), holder=holder,
                    check=check)
    print("ready", flush=True)
    return daemon.run_until_signalled()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
