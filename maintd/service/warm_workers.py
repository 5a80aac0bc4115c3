"""Keeping a local Spark session's Python workers alive between the daemon's runs.

Spark closes the idle Python workers once none has worked for a minute (PySpark's worker factory looks every
10 s; a fixed timeout, not a setting), and the daemon's runs are minutes apart, so without help every run on
Spark starts new workers, and each imports maintd, pyarrow and pandas on its first task: the clustering plan
of the benchmark's 25x table took 1.59 s after 75 s idle, 0.70 s with the workers kept (docs/benchmarks.md).
:class:`WarmWorkers` runs an empty job of one task per core (:func:`maintd.execution.spark.warm_up`) every
``interval`` seconds (below the minute), so the workers, imports done, are there when the next run comes.

Only for a local master by default (:func:`keep_warm_interval`): on a cluster the same jobs would keep
executors busy that dynamic allocation should release, and would hold an executor's workers on every
node. A ping is skipped while a job of the session runs (its workers are busy anyway) and once the driver
is gone; a failed ping is logged and the next one tried.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from loguru import logger

DEFAULT_LOCAL_INTERVAL = 45.0
"""Seconds between two pings with a local master: below Spark's minute with room for a late ping."""


def keep_warm_interval(setting: float | None, master: str | None) -> float:
    """The seconds between pings for ``setting`` (``spark.keep_workers_warm_seconds``) and the session's
    ``master``: 0 (off) for a cluster or Spark Connect unless set."""
    if setting is not None:
        return float(setting)
    return DEFAULT_LOCAL_INTERVAL if master is not None and master.startswith("local") else 0.0


class WarmWorkers:
    """A background thread that runs ``ping`` every ``interval`` seconds unless ``skip`` says not to."""

    def __init__(self, interval: float, ping: Callable[[], Any], skip: Callable[[], bool] = lambda: False) -> None:
        self.interval = interval
        self.ping = ping
        self.skip = skip
        self.pings = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self.interval <= 0 or self._thread is not None:
            return
        self._thread = threading.Thread(target=self._loop, name="maintd-warm-workers", daemon=True)
        self._thread.start()
        logger.info("keeping the Spark Python workers warm: an empty job every {:g} s between runs", self.interval)

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _loop(self) -> None:
        failed = False
        while not self._stop.wait(self.interval):
            try:
                if self.skip():
                    continue
                self.ping()
                self.pings += 1
                failed = False
            except Exception as exc:  # the driver's health is watched elsewhere; log a failure once in a row
                if not failed:
                    logger.warning("keeping the Spark workers warm failed: {}: {}", type(exc).__name__, exc)
                failed = True


def keep_session_warm(spark: Any, interval: float, options: Any = None,
                      lost: Callable[[], str | None] = lambda: None) -> WarmWorkers:
    """A started keeper of ``spark``'s (classic) workers: :func:`maintd.execution.spark.warm_up` with
    ``options`` every ``interval`` seconds, skipped while a job runs or once ``lost`` names a reason."""
    from maintd.execution.spark import warm_up

    warm = WarmWorkers(interval, lambda: warm_up(spark, options),
                       skip=lambda: lost() is not None or session_busy(spark))
    warm.start()
    return warm


def session_busy(spark: Any) -> bool:
    """Whether a job of the (classic) session is running."""
    return bool(spark.sparkContext.statusTracker().getActiveJobsIds())
