"""What a maintd task imports, loaded ahead of the processes that run tasks, so that each process forked afterwards
starts with it: the PySpark worker daemon (:mod:`maintd.pyspark_daemon`, when ``MAINTD_WORKER_PRELOAD=1``) and the
fork server of local execution (:mod:`maintd.execution.local_preload`).

At import it loads nothing, and it names the task's modules rather than importing them: the daemon module, which
:mod:`maintd.execution.spark` imports, uses it without importing that module back.
"""

from __future__ import annotations

WORKER_MODULES = ("maintd.execution.spark", "maintd.execution.rewrite", "pyarrow.pandas_compat")
"""What a maintd task imports in a Python worker: the task function's module, the rewrite and what they import."""


def preload_worker() -> None:
    """Import what a maintd task imports, in the PySpark daemon before it forks its workers (when
    ``MAINTD_WORKER_PRELOAD=1``, :mod:`maintd.pyspark_daemon`).

    Spark closes a Python worker idle for a minute, so a daemon whose runs are minutes apart starts new workers
    for every run, and each imports maintd and pyarrow, and in its first unit pandas (pyarrow's first conversion
    of a numpy array, ``pa.array``, imports it to recognise pandas objects). Forked from a daemon that has them,
    a worker starts with all of it. Runs nothing of Arrow's but that one conversion: no thread pool exists
    before the fork.
    """
    import importlib

    import numpy as np
    import pyarrow as pa

    for name in WORKER_MODULES:
        importlib.import_module(name)
    pa.array(np.zeros(1, np.int64))
