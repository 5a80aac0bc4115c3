"""Thread pools shared by a process, safe across ``fork``.

A ``ThreadPoolExecutor`` kept in a module global and inherited by a forked child has no threads there: the
child's first task waits forever in its queue. Servers and pools that fork their workers (Gunicorn, Celery's
prefork pool, ``multiprocessing`` with the fork start method, PySpark's worker daemon) do exactly that after
the parent has used maintd. :class:`SharedThreads` starts its executor on first use and forgets it in a forked
child (``os.register_at_fork``), with its lock, which another thread of the parent may have held at the fork:
the child starts its own executor when it first needs one.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor


class SharedThreads:
    """A ``ThreadPoolExecutor`` of ``workers`` threads, started on first use and shared by the process.

    A task given to it must never wait on another task of the same executor (sharing it cannot deadlock then).
    """

    def __init__(self, workers: int, name: str) -> None:
        self.workers = workers
        self.name = name
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        os.register_at_fork(after_in_child=self._forget)

    def get(self) -> ThreadPoolExecutor:
        """The executor of this process (started now if this process has none yet)."""
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix=self.name)
            return self._pool

    def _forget(self) -> None:
        """In a forked child: the inherited executor has no threads, and the lock may be held by one."""
        self._lock = threading.Lock()
        self._pool = None


__all__ = ["SharedThreads"]
