"""Small plans on this machine: one process per pack, forked by the standard library's fork server.

A plan below ``in_process_max_bytes`` runs here rather than as Spark jobs. Each pack runs in a
``multiprocessing`` process of the ``forkserver`` context, started for the pack and gone when it is done;
nothing idles between runs but the fork server, which has imported what a unit needs (:data:`PRELOAD`).
Processes because units of small files hold the GIL between short Arrow calls and only a process can be
killed; forked from the server, a child copies no lock of this process's threads. A script that runs plans in
process keeps its work under ``if __name__ == "__main__":``.

**What a child inherits.** :func:`start_fork_server` starts the server with the environment of
:func:`~maintd.redaction.child_environment` (no state-store credentials), after logging has taken over fd 2,
so what a child writes there is redacted. The daemon starts it before its threads; a library caller at its
first run in process.

**Timeouts.** A pack has :func:`pack_timeout` seconds. A child still running then is killed, as is one that
dies; either way the pack runs once more in a new process and the lost attempt's files are deleted
(:func:`maintd.execution.scheduler.remove_attempts`). A second loss fails the pack's units.

**Threads** (``spark.maintd.inProcess.workers=threads``, and tables whose storage only this process knows:
:func:`processes_can_open`) run packs here (:class:`~maintd.execution.scheduler.LocalBackend`); a hung unit
there is reported failed at its timeout and its thread left to end on its own.

docs/architecture.md ("Plan, execute, commit": small plans in process, timeouts) gives the reasons.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import threading
import time
from collections.abc import Sequence
from multiprocessing import forkserver
from multiprocessing.connection import Connection, wait
from typing import Any

from loguru import logger

from maintd.execution.specs import ExecutionOptions, TaskResult, TaskSpec
from maintd.redaction import withheld_from_children
from maintd.storage import carry_storage
from maintd.storage.base import is_builtin_storage

CONTEXT = "forkserver"
PRELOAD = ["__main__", "maintd.execution.local", "maintd.execution.local_preload"]
"""What the fork server imports once for all its children: the main module, and what a unit runs, warmed up
(:mod:`maintd.execution.local_preload`: the rewrite, pyarrow, and the pandas that pyarrow's first conversion of
numpy data imports). Python before 3.13 never hands the fork server the main module's path, so each child still
runs a main script's body: the ``maintd`` command's imports are preloaded for it (:func:`_preload`)."""
ATTEMPTS = 2
"""A pack's tries: a lost process (dead, or killed at its timeout) costs one more, in a new process."""
TIMEOUT_BASE_SECONDS = 300.0
TIMEOUT_SECONDS_PER_MIB = 1.0
"""The default timeout of a pack: 5 minutes plus a second per MiB of its input (1 MiB/s, far below any disk or
object store)."""

_LOCK = threading.Lock()
_started = False


class UnitLostError(RuntimeError):
    """The process that ran a pack died, or was killed at the pack's timeout (the message says which)."""


def pack_timeout(pack: Sequence[TaskSpec], options: ExecutionOptions) -> float:
    """Seconds a pack may run: ``options.unit_timeout_seconds`` when set, else :data:`TIMEOUT_BASE_SECONDS` plus
    :data:`TIMEOUT_SECONDS_PER_MIB` per MiB of the pack's input."""
    if options.unit_timeout_seconds:
        return options.unit_timeout_seconds
    size = sum(f.bytes for s in pack for f in s.inputs)
    return TIMEOUT_BASE_SECONDS + TIMEOUT_SECONDS_PER_MIB * size / (1 << 20)


def _preload() -> list[str]:
    """:data:`PRELOAD`, and ``maintd.cli`` under the ``maintd`` command, whose script each child runs again."""
    main = getattr(sys.modules.get("__main__"), "__file__", None) or ""
    return [*PRELOAD, "maintd.cli"] if os.path.basename(main) == "maintd" else list(PRELOAD)


def _context() -> Any:
    ctx = multiprocessing.get_context(CONTEXT)
    if CONTEXT == "forkserver":  # the bench measures "spawn" too
        ctx.set_forkserver_preload(_preload())
    return ctx


def start_fork_server() -> None:
    """Start the fork server now, with an environment without the state store's credentials; idempotent.

    Call it before starting threads that read the environment (it withholds those variables from
    ``os.environ`` for the moment it takes to start the server) and after logging has taken over fd 2.
    """
    global _started
    with _LOCK:
        if _context().get_start_method() == "forkserver":
            with withheld_from_children():
                forkserver.ensure_running()
        _started = True


def processes_can_open(uri: str) -> bool:
    """Whether a child process can run units of the table at ``uri`` as this process would: this process knows
    its interpreter (an embedded one may not: ``sys.executable`` empty), and the scheme's storage is maintd's own
    (a child has no storage registered in this process only)."""
    return bool(sys.executable) and is_builtin_storage(uri)


def _run_child(answer: Connection, wire: list[str], request: dict[str, Any], attempt: int) -> None:
    """A pack in a child process: what a Spark task runs (:func:`~maintd.execution.spark.run_pack_in_worker`),
    its results sent back as one list of JSON strings."""
    from maintd.execution.spark import run_pack_in_worker
    from maintd.storage.options import CarriedStorage, StorageOptions

    uri = request.get("uri")
    storage = CarriedStorage(uri, StorageOptions.of(request.get("options") or {})) if uri else None
    answer.send(run_pack_in_worker(wire, threads=int(request.get("threads") or 1), freeze=False, storage=storage,
                                   attempt=attempt))
    answer.close()


class ProcessBackend:
    """Packs run in child processes of the fork server, ``workers`` at once, each with a timeout."""

    engine = "in-process"

    def __init__(self, workers: int, table_uri: str, options: ExecutionOptions | None = None) -> None:
        self.workers = workers
        self.options = options or ExecutionOptions()
        carried = carry_storage(table_uri, credentials=True)  # its own children, on this machine
        self.request: dict[str, Any] = {"threads": self.options.pack_threads, "uri": carried.uri if carried else None,
                                        "options": dict(carried.options) if carried else None}
        self._cancelled = threading.Event()

    def cores(self) -> int:
        return self.workers

    def slots(self) -> int:
        return self.workers  # one process per core: more would only share the cores

    def run(self, packs: Sequence[Sequence[TaskSpec]]) -> list[TaskResult]:
        return [r for p in packs for r in self._run_pack(p)]

    def _run_pack(self, pack: Sequence[TaskSpec]) -> list[TaskResult]:
        wire = [s.model_dump_json() for s in pack]
        timeout = pack_timeout(pack, self.options)
        for attempt in range(ATTEMPTS):
            try:
                return [TaskResult.model_validate_json(x) for x in self._attempt(wire, attempt, timeout)]
            except UnitLostError as exc:
                units = ", ".join(f"{s.task_id}#{s.unit}" for s in pack)
                if attempt + 1 < ATTEMPTS:
                    logger.warning("{}; its pack ({}) runs again in a new process", exc, units)
                else:
                    logger.error("{} again; its pack ({}) fails", exc, units)
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    def _attempt(self, wire: list[str], attempt: int, timeout: float) -> list[str]:
        if self._cancelled.is_set():
            raise RuntimeError("not started: the run was abandoned")
        if not _started:
            start_fork_server()  # a library caller's first run: the server gets the withheld environment too
        ctx = _context()
        receive, send = ctx.Pipe(duplex=False)
        child = ctx.Process(target=_run_child, args=(send, wire, self.request, attempt), daemon=True,
                            name=f"maintd-pack-{attempt}")
        child.start()
        send.close()
        started = time.monotonic()
        try:
            return self._answer(child, receive, started + timeout, timeout)
        finally:
            if child.is_alive():
                child.kill()
            child.join()
            receive.close()

    def _answer(self, child: Any, receive: Connection, deadline: float, timeout: float) -> list[str]:
        """The child's results, waiting until ``deadline`` (and no longer once the run is cancelled)."""
        while True:
            left = deadline - time.monotonic()
            if self._cancelled.is_set():
                raise RuntimeError("cancelled: the run was abandoned")
            if left <= 0:
                child.kill()
                raise UnitLostError(f"local process {child.pid} did not finish its pack within {timeout:g} s "
                                    "(spark.maintd.task.timeout) and was killed")
            if wait([receive, child.sentinel], min(left, 1.0)):
                try:
                    out: list[str] = receive.recv()
                    return out
                except EOFError:
                    child.join()
                    code = child.exitcode
                    how = f"killed by signal {-code}" if code is not None and code < 0 else f"exit code {code}"
                    raise UnitLostError(f"local process {child.pid} ended while it ran its pack ({how})") from None

    def cancel(self) -> None:
        """Packs of this run not started yet are not started, and running ones are killed (their files are
        deleted when their units are reported failed)."""
        self._cancelled.set()

    def describe(self) -> tuple[str | None, str | None]:
        return None, None


__all__ = ["ProcessBackend", "UnitLostError", "pack_timeout", "processes_can_open", "start_fork_server"]
