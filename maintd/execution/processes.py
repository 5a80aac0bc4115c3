"""Small plans in local worker processes: every core busy, no Spark job, no shared GIL.

A plan below ``in_process_max_bytes`` runs on this machine rather than as Spark jobs (a Spark job's fixed cost
is most of a small rewrite). Its units are mostly Arrow's native code, but a unit of many small files makes
thousands of short calls, and the Python between them holds the GIL: the clustering of the default benchmark
workload (3,200 files) took 0.490 s in two threads of one process and 0.397 s in two worker processes, its
full compaction 0.439 and 0.349 s (medians of 14 alternating executions, docs/benchmarks.md). So by default
(``in_process_workers="processes"``) units run in worker processes of this machine, one pack per worker at a
time, as a Spark task runs them in a Python worker (:func:`maintd.execution.spark.run_pack_in_worker`): specs
and results cross as JSON lines on the worker's stdin and stdout, and each worker opens the table's storage
from its URI and the options carried with the pack (:mod:`maintd.execution.worker`).

**Workers** are ``python -m maintd.execution.worker`` processes of this interpreter, started on first use
and kept for the life of this process (a daemon starts them once, not per run; :func:`warm_workers` starts
them before the first plan). They are not forked: a fork of the daemon would copy its scheduler, database
and Arrow threads' locks, and ``multiprocessing``'s spawn and fork server run the caller's main script
again in every worker (a script without a ``__main__`` guard would run twice). They run in a session of
their own (a Ctrl+C stops the process that owns them, which stops them), and exit when their stdin closes,
so they never outlive it.

**A worker that dies** (killed for memory, a crash in native code) fails only the pack it was running: the
pack runs once more on a new worker, as Spark runs a task again in a new attempt, and the files of the dead
attempt are deleted when the pack's result is accepted (:func:`maintd.execution.scheduler.remove_attempts`:
every attempt's names start with the unit's token). A pack whose second worker dies too fails its units,
which the next run plans again. In threads the same death would have taken the daemon down.

**What workers cannot see.** A storage registered in this process only (a test's fault-injecting wrapper, a
scheme registered by the embedding program) does not exist in a worker, so a table whose URI does not
resolve to maintd's own storage runs in threads (:func:`workers_can_open`).
"""

from __future__ import annotations

import atexit
import json
import os
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

from loguru import logger

from maintd.execution.specs import TaskResult, TaskSpec
from maintd.redaction import child_environment
from maintd.storage import carry_storage
from maintd.storage.base import is_builtin_storage

WORKER_MODULE = "maintd.execution.worker"
READY = b"ready\n"
"""The line a worker writes once it has imported what a unit needs."""


class WorkerDiedError(Exception):
    """A worker process ended while it ran a pack (its exit code or signal in the message)."""


class _Worker:
    """One worker process and its pipes; used by one thread at a time (the pool hands it out)."""

    def __init__(self, command: Sequence[str] | None = None) -> None:
        """Start ``python -m maintd.execution.worker`` (or ``command``, which speaks the same protocol)."""
        env = child_environment()  # the state store's credentials stay in this process
        root = str(Path(__file__).resolve().parents[2])  # this maintd, whatever sys.path the caller set up
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
        self.proc = subprocess.Popen(list(command or [sys.executable, "-m", WORKER_MODULE]), stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, env=env, start_new_session=True)
        self.ready = False

    def wait_ready(self) -> None:
        if not self.ready:
            line = self._stdout().readline()
            if line != READY:
                raise self._died("while starting")
            self.ready = True

    def call(self, request: dict[str, object]) -> list[str]:
        self.wait_ready()
        stdin = self.proc.stdin
        assert stdin is not None
        try:
            stdin.write(json.dumps(request).encode() + b"\n")
            stdin.flush()
        except (BrokenPipeError, OSError) as exc:
            raise self._died("before it took the pack") from exc
        line = self._stdout().readline()
        if not line.endswith(b"\n"):  # nothing, or an answer cut short: the worker is gone
            raise self._died("while it ran the pack")
        out: list[str] = json.loads(line)
        return out

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, *, kill: bool = False) -> None:
        """Close its stdin (it exits when idle), or kill it."""
        if kill:
            self.proc.kill()
        try:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        except OSError:
            pass
        self._reap()
        if self.proc.stdout is not None:
            self.proc.stdout.close()

    def _reap(self) -> int:
        """Its exit code once it has ended (killed if it has not within 5 s)."""
        try:
            return self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()

    def _stdout(self):  # type: ignore[no-untyped-def]
        assert self.proc.stdout is not None
        return self.proc.stdout

    def _died(self, when: str) -> WorkerDiedError:
        code = self._reap()
        how = f"killed by signal {-code}" if code < 0 else f"exit code {code}"
        return WorkerDiedError(f"local worker process {self.proc.pid} ended {when} ({how})")


class WorkerPool:
    """Up to ``size`` workers, started when needed and kept; :meth:`take` waits for an idle one."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._idle: list[_Worker] = []
        self._count = 0
        self._cond = threading.Condition()
        self._closed = False

    def take(self, cancelled: threading.Event | None = None) -> _Worker:
        """An idle worker, a new one if fewer than ``size`` run, else the next one freed; raises once ``cancelled``
        is set or the pool is stopped."""
        with self._cond:
            while True:
                if self._closed:
                    raise RuntimeError("the local worker pool is stopped")
                if cancelled is not None and cancelled.is_set():
                    raise RuntimeError("not started: the run was abandoned")
                if self._idle:
                    return self._idle.pop()
                if self._count < self.size:
                    self._count += 1
                    break
                self._cond.wait(0.5)
        try:
            return _Worker()
        except BaseException:
            with self._cond:
                self._count -= 1
                self._cond.notify()
            raise

    def give(self, worker: _Worker) -> None:
        """Return ``worker`` (a dead one is dropped and its place freed)."""
        with self._cond:
            if worker.alive() and not self._closed:
                self._idle.append(worker)
            else:
                self._count -= 1
                worker.stop()
            self._cond.notify()

    def discard(self, worker: _Worker) -> None:
        """Drop ``worker`` (it died or cannot be trusted), freeing its place."""
        worker.stop(kill=True)
        with self._cond:
            self._count -= 1
            self._cond.notify()

    def warm(self) -> None:
        """Start every worker now and wait until each has imported what a unit needs."""
        taken = [self.take() for _ in range(self.size)]
        try:
            for w in taken:
                w.wait_ready()
        finally:
            for w in taken:
                self.give(w)

    def stop(self) -> None:
        with self._cond:
            self._closed = True
            idle, self._idle = self._idle, []
            self._count -= len(idle)
            self._cond.notify_all()
        for w in idle:
            w.stop()


_POOL: WorkerPool | None = None
_LOCK = threading.Lock()


def worker_pool(size: int) -> WorkerPool:
    """The process's pool of up to ``size`` workers (a pool of another size is stopped and replaced)."""
    global _POOL
    with _LOCK:
        if _POOL is None or _POOL.size != size:
            old, _POOL = _POOL, WorkerPool(size)
            if old is not None:
                old.stop()
        return _POOL


def warm_workers(size: int) -> None:
    """Start the pool's workers now: the first plan then pays no start-up (about 0.5 s on two cores)."""
    worker_pool(size).warm()


@atexit.register
def stop_workers() -> None:
    """Stop the idle workers (a busy one stops when its pack ends and its stdin closes with this process)."""
    global _POOL
    with _LOCK:
        pool, _POOL = _POOL, None
    if pool is not None:
        pool.stop()


def workers_can_open(uri: str) -> bool:
    """Whether a worker process can run units of the table at ``uri`` as this process would: this process
    knows its interpreter (an embedded one may not: ``sys.executable`` empty), and the scheme's storage is
    maintd's own (a worker has no storage registered in this process only)."""
    return bool(sys.executable) and is_builtin_storage(uri)


class ProcessBackend:
    """Packs run in the local worker pool (:func:`worker_pool`), one pack per worker at a time."""

    engine = "in-process"

    def __init__(self, workers: int, table_uri: str, pack_threads: int = 1) -> None:
        self.workers = workers
        carried = carry_storage(table_uri, credentials=True)  # its own children, on this machine
        self.request: dict[str, object] = {"threads": pack_threads, "uri": carried.uri if carried else None,
                                           "options": dict(carried.options) if carried else None}
        self._cancelled = threading.Event()

    def cores(self) -> int:
        return self.workers

    def slots(self) -> int:
        return self.workers  # a pack queued behind a busy worker would only wait

    def run(self, packs: Sequence[Sequence[TaskSpec]]) -> list[TaskResult]:
        return [r for p in packs for r in self._run_pack([s.model_dump_json() for s in p])]

    def _run_pack(self, wire: list[str]) -> list[TaskResult]:
        pool = worker_pool(self.workers)
        try:
            out = self._call(pool, wire, attempt=0)
        except WorkerDiedError as exc:
            # once more on a new worker: that attempt's results say so, and when they are accepted the dead
            # attempt's files are deleted (a second death fails the pack)
            logger.warning("{}; its pack of {} unit(s) runs again on a new worker", exc, len(wire))
            out = self._call(pool, wire, attempt=1)
        return [TaskResult.model_validate_json(x) for x in out]

    def _call(self, pool: WorkerPool, wire: list[str], attempt: int) -> list[str]:
        worker = pool.take(self._cancelled)
        try:
            out = worker.call({**self.request, "pack": wire, "attempt": attempt})
        except BaseException:
            pool.discard(worker)  # dead, or interrupted mid-pack: its pipe state is unknown
            raise
        pool.give(worker)
        return out

    def cancel(self) -> None:
        """Packs of this run that have no worker yet are not started (a running pack finishes; its files are
        deleted when its result is not committed)."""
        self._cancelled.set()

    def describe(self) -> tuple[str | None, str | None]:
        return None, None


__all__ = ["ProcessBackend", "WorkerDiedError", "WorkerPool", "stop_workers", "warm_workers", "worker_pool",
           "workers_can_open"]
