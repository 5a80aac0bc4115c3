"""PySpark's worker daemon, with workers that acknowledge at once, collect garbage cheaply and, if asked,
start with maintd loaded (``spark.python.daemon.module``).

This module is PySpark's own daemon (:mod:`pyspark.daemon`) with three changes:

* the worker's input stream reads through :class:`QuickAckReader`, which sets ``TCP_QUICKACK`` before every
  read, so the kernel's delayed acknowledgement does not hold back the JVM's next write of a task (over a Unix
  domain socket the stream is PySpark's).
* after a task that imported modules, :func:`freeze_after_imports` collects and freezes what survives
  (``gc.freeze``), so the collection PySpark runs after every task walks only what tasks allocate.
* with ``MAINTD_WORKER_PRELOAD=1`` in the executors' environment, :func:`preload` imports what maintd's tasks
  import before the first fork, so every worker starts with it loaded (a failed preload is reported on
  standard error and the workers import for themselves).

Importing the module changes nothing and starts no thread (it loads only the standard library and
:mod:`pyspark.daemon`); run as ``python -m maintd.pyspark_daemon`` it puts its :func:`worker` in PySpark's
daemon loop. The fork after the preload is safe: the only other thread is jemalloc's background thread, which
jemalloc stops around a fork. Forked workers lack that thread, so
:func:`maintd.execution.spark.run_pack_in_worker` returns Arrow's freed memory after each task.

It is opt-in (``spark.worker_daemon: true``) because it replaces a private function of PySpark's.
:func:`incompatibility` checks the running pyspark for what the module relies on; when it differs, PySpark's
own daemon runs and a warning says why.

docs/architecture.md ("Spark modes") gives the reasons; docs/benchmarks.md ("Maintenance") the measurements.
"""

from __future__ import annotations

import contextlib
import gc
import inspect
import io
import os
import socket
import sys
from typing import Any

import pyspark.daemon as _daemon

TCP_QUICKACK = getattr(socket, "TCP_QUICKACK", None)
"""Linux only; elsewhere the stock daemon runs unchanged."""

_stock_worker = _daemon.worker

WORKER_PARAMETERS = ("sock", "authenticated")
"""The parameters of ``pyspark.daemon.worker`` this module calls it with and replaces it by."""
WORKER_INPUT = 'os.fdopen(os.dup(sock.fileno()), "rb"'
"""How ``pyspark.daemon.worker`` opens its input, which :func:`worker` answers with a :class:`QuickAckReader`."""


def incompatibility(daemon: Any = _daemon) -> str | None:
    """Why this module cannot stand in for the running pyspark's daemon (None: it can).

    Checks what it relies on: ``worker(sock, authenticated)``, ``manager()`` without parameters, and the worker
    opening its input with ``os.fdopen`` as PySpark 4.1 to 4.3 do.
    """
    import pyspark

    version = getattr(pyspark, "__version__", "?")
    worker_fn, manager_fn = getattr(daemon, "worker", None), getattr(daemon, "manager", None)
    if not callable(worker_fn) or not callable(manager_fn):
        return f"pyspark {version}'s pyspark.daemon has no worker() or manager()"
    try:
        params = tuple(inspect.signature(worker_fn).parameters)
        manager_params = [p for p in inspect.signature(manager_fn).parameters.values() if p.default is p.empty]
        source = inspect.getsource(worker_fn)
    except (TypeError, ValueError, OSError) as exc:
        return f"pyspark {version}'s pyspark.daemon cannot be inspected ({exc})"
    if params != WORKER_PARAMETERS:
        return f"pyspark {version}'s pyspark.daemon.worker takes {params}, not {WORKER_PARAMETERS}"
    if manager_params:
        return f"pyspark {version}'s pyspark.daemon.manager needs arguments ({[p.name for p in manager_params]})"
    if WORKER_INPUT not in source:
        return f"pyspark {version}'s pyspark.daemon.worker no longer opens its input with {WORKER_INPUT}"
    return None


class QuickAckReader(io.RawIOBase):
    """A TCP socket's receiving end that acknowledges what it reads at once (see the module docstring).

    Closing it closes nothing: the socket is the daemon's, which closes it when the worker ends.
    """

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        with contextlib.suppress(OSError):  # the peer went away: the read below says so
            self._sock.setsockopt(socket.IPPROTO_TCP, TCP_QUICKACK, 1)  # type: ignore[arg-type]
        return self._sock.recv_into(buffer)


def quick_ack_applies(sock: socket.socket) -> bool:
    """Whether ``sock`` is TCP on a platform with ``TCP_QUICKACK``."""
    return TCP_QUICKACK is not None and sock.family in (socket.AF_INET, socket.AF_INET6)


_modules_at_freeze = 0


def freeze_after_imports() -> None:
    """Collect and freeze the worker's objects if modules were imported since the last freeze (see the
    module docstring)."""
    global _modules_at_freeze
    if len(sys.modules) != _modules_at_freeze:
        gc.collect()
        gc.freeze()
        _modules_at_freeze = len(sys.modules)


def worker(sock: socket.socket, authenticated: bool) -> int:
    """:func:`pyspark.daemon.worker` (one task of a forked worker) reading through :class:`QuickAckReader`,
    then :func:`freeze_after_imports` when the worker will be reused (the task ended well).

    PySpark opens the worker's input as ``os.fdopen(os.dup(sock.fileno()), "rb", buffer_size)``; that one
    call is answered with a buffered :class:`QuickAckReader` of the same size, and every other call of
    ``os.fdopen`` goes through unchanged. Should a PySpark version open its input otherwise, the worker
    runs as PySpark's, only without the quick acknowledgement.
    """
    code = _task(sock, authenticated)
    if code == 0:
        freeze_after_imports()
    return code


def _task(sock: socket.socket, authenticated: bool) -> int:
    if not quick_ack_applies(sock):
        return _stock_worker(sock, authenticated)
    stock_fdopen = os.fdopen

    def fdopen(fd: int, mode: str = "r", buffering: int = -1, *args: Any, **kwargs: Any) -> Any:
        if mode == "rb" and not args and not kwargs and os.path.sameopenfile(fd, sock.fileno()):
            os.fdopen = stock_fdopen  # once: the task's own code gets the real one
            os.close(fd)
            return io.BufferedReader(QuickAckReader(sock), buffering if buffering > 0 else io.DEFAULT_BUFFER_SIZE)
        return stock_fdopen(fd, mode, buffering, *args, **kwargs)

    os.fdopen = fdopen
    try:
        return _stock_worker(sock, authenticated)
    finally:
        os.fdopen = stock_fdopen


PRELOAD_ENV = "MAINTD_WORKER_PRELOAD"
"""``1`` in the executors' environment: the daemon preloads maintd for its workers (see the module docstring)."""
PRELOADED_ENV = "MAINTD_WORKER_PRELOADED"
"""Set by a daemon whose preload succeeded (to the number of modules it loaded): its workers inherit it."""


def preload() -> bool:
    """In the daemon, before its first fork: import what maintd's tasks import, collect and freeze it (see
    the module docstring). Returns whether it did; a failure is reported on standard error, not raised."""
    global _modules_at_freeze
    if os.environ.get(PRELOAD_ENV, "").strip() != "1":
        return False
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # read when numpy loads OpenBLAS: no thread pool then
    try:  # nothing may reach the standard output before the daemon writes its port there for the JVM
        with contextlib.redirect_stdout(sys.stderr):
            from maintd.worker_preload import preload_worker

            preload_worker()
    except Exception as exc:
        print(f"maintd.pyspark_daemon: preloading maintd for the workers failed ({type(exc).__name__}: {exc}); "
              "each worker imports it on its first task", file=sys.stderr, flush=True)
        return False
    gc.collect()
    gc.freeze()
    _modules_at_freeze = len(sys.modules)
    os.environ[PRELOADED_ENV] = str(_modules_at_freeze)
    return True


def main() -> None:
    """Run as Spark runs a daemon module: this module's :func:`worker` in PySpark's daemon loop, or PySpark's
    daemon unchanged when the executor's pyspark is not the one this module expects (:func:`incompatibility`)."""
    reason = incompatibility()
    if reason is not None:
        print(f"maintd.pyspark_daemon: {reason}; running PySpark's own daemon", file=sys.stderr, flush=True)
    else:
        _daemon.worker = worker  # the daemon's loop calls the module-level name for every task
        preload()
    _daemon.manager()


if __name__ == "__main__":  # as Spark starts it: ``python -m maintd.pyspark_daemon``
    main()
