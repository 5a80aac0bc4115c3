"""A real daemon loop in its own process with a stand-in maintenance job, for the replica tests.

Usage: ``python daemon_worker.py URL SCHEMA|- HOLDER TABLES WORK_SECONDS``

It runs :class:`~maintd.service.daemon.Daemon` (scheduler, leases, store, backoff, SIGTERM handling)
exactly as ``maintd daemon`` does, against the given store, on ``TABLES`` fake table URIs; maintaining
a table sleeps ``WORK_SECONDS`` (no Spark, so several replicas fit on a small machine). It prints
``ready`` once its first pass is scheduled, and exits 0 after SIGTERM.
"""

from __future__ import annotations

import sys
import time

from maintd.service.daemon import Daemon
from maintd.service.recording import open_run
from maintd.service.records import RunResult
from maintd.service.store import StateStore
from maintd.settings import Settings


def main(argv: list[str]) -> int:
    url, schema, holder, n_tables, work = argv
    settings = Settings.model_validate({
        "warehouse": {"tables": [f"/wh/t{i}" for i in range(int(n_tables))], "discovery": False},
        "scheduler": {"maintenance_interval_seconds": 0.2, "reclamation_interval_seconds": 3600, "jitter_seconds": 0,
                      "max_concurrent_tables": 2, "shutdown_grace_seconds": 5},
        "store": {"url": url, "db_schema": None if schema == "-" else schema, "lease_duration_seconds": 2,
                  "lease_renew_interval_seconds": 0.5},
    })
    store = StateStore(url, db_schema=settings.store.db_schema)

    def maintain(uri: str) -> RunResult:
        open_run()  # the stand-in has work: its run is recorded from the start, as a real one executing a plan
        time.sleep(float(work))
        return RunResult(metrics={"worked_by": holder})

    daemon = Daemon(settings, store, maintain, lambda uri: RunResult(), holder=holder)
    print("ready", flush=True)
    return daemon.run_until_signalled()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
