"""A real daemon loop in its own process with a stand-in maintenance job, for the replica tests.

Usage: ``python daemon_worker.py URL SCHEMA|- HOLDER TABLES WORK_SECONDS [PASSES]``

It runs :class:`~maintd.service.daemon.Daemon` (scheduler, leases, store, backoff, SIGTERM handling)
exactly as ``maintd daemon`` does, against the given store, on ``TABLES`` fake table URIs; maintaining
a table sleeps ``WORK_SECONDS`` (no Spark, so several replicas fit on a small machine). It prints
``ready`` once its first pass is scheduled, and exits 0 after SIGTERM. With ``PASSES`` (a path), the number
of maintenance passes it has finished is written there after each one.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

from maintd.service.daemon import Daemon
from maintd.service.recording import open_run
from maintd.service.records import RunKind, RunResult
from maintd.service.store import StateStore
from maintd.settings import Settings


def main(argv: list[str]) -> int:
    url, schema, holder, n_tables, work, *passes_file = argv
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
    if passes_file:
        run_pass, passes = daemon.run_pass, [0]

        def counted(kind: RunKind, **kw: Any) -> list[str]:
            started = run_pass(kind, **kw)
            if kind is RunKind.MAINTENANCE:  # written whole, then renamed: a reader never sees it half-written
                passes[0] += 1
                Path(f"{passes_file[0]}.tmp").write_text(str(passes[0]))
                os.replace(f"{passes_file[0]}.tmp", passes_file[0])
            return started

        daemon.run_pass = counted  # type: ignore[method-assign]  # the scheduler takes it at start
    print("ready", flush=True)
    return daemon.run_until_signalled()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
