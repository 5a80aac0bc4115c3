"""Small plans on this machine: packs run in warm worker processes of the standard library's fork server.

A plan below ``in_process_max_bytes`` runs here rather than as Spark jobs. Each pack runs in a *lane*: a
:class:`concurrent.futures.ProcessPoolExecutor` of one process of the ``forkserver`` context, which has imported
what a unit needs (:data:`PRELOAD`), and serves one pack at a time. A run takes idle lanes or starts new ones and
gives them back, so the runs that follow find processes whose imports are done and whose memory is mapped.
A lane idle for :data:`IDLE_SECONDS` ends, so an idle daemon holds none.
Processes, because units of small files hold the GIL between short Arrow calls and only a process can be killed;
one process per lane, so that killing a hung pack's process breaks no other pack.

**What a lane inherits.** :func:`start_fork_server` starts the server without the state store's credentials in
its environment (:func:`~maintd.redaction.child_environment`), with :func:`lane_allocators`, after logging has
taken over fd 2. A lane whose caller died ends too.

**Timeouts.** A pack has :func:`pack_timeout` seconds. A lane still running it then is killed, as is one that
dies; either way the pack runs once more in another lane and the lost attempt's files are deleted
(:func:`maintd.execution.scheduler.remove_attempts`). A second loss fails the pack's units.

**Threads** (``spark.maintd.inProcess.workers=threads``, or a storage only this process knows) run packs in
:class:`~maintd.execution.scheduler.LocalBackend`. A script that runs plans in process keeps its work under
``if __name__ == "__main__":``. docs/architecture.md ("Plan, execute, commit") gives the reasons.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import select
import signal
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from multiprocessing import forkserver
from multiprocessing.context import BaseContext
from typing import Any, cast

from loguru import logger

from maintd.execution import malloc
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
"""A pack's tries: a lost process (dead, or killed at its timeout) costs one more, in another lane."""
TIMEOUT_BASE_SECONDS = 300.0
TIMEOUT_SECONDS_PER_MIB = 1.0
"""The default timeout of a pack: 5 minutes plus a second per MiB of its input (1 MiB/s, far below any disk or
object store)."""
IDLE_SECONDS = 60.0
"""A lane given no pack for this long ends (PySpark's idle Python workers end after a minute too): runs that follow
each other within it find warm processes, and an idle daemon holds none."""
LANE_ALLOCATORS = {"ARROW_DEFAULT_MEMORY_POOL": "system", "MIMALLOC_PURGE_DELAY": "-1",
                   "GLIBC_TUNABLES": "glibc.malloc.trim_threshold=268435456:glibc.malloc.mmap_threshold=33554432"}
"""The environment the fork server starts with, so that its lanes keep the memory they free for their next unit.
Arrow's buffers come from the lanes' ``malloc`` (jemalloc where preloaded, :data:`JEMALLOC_CONF`, else glibc's,
which keeps a large top of its heap and maps apart only very large blocks). Else each unit maps its memory anew,
which costs most where a hypervisor has reclaimed the guest's freed memory (docs/benchmarks.md, "Warm processes
for small plans"). Not Arrow's default, mimalloc: it gave a new lane's first units transparent huge pages, far
slower to fault in ("Arrow's buffers from the lanes' malloc"). A lane's memory goes back when it ends. A variable
the caller set is kept."""
JEMALLOC_CONF = "dirty_decay_ms:-1,muzzy_decay_ms:-1"
"""jemalloc's settings in the lanes: it keeps the pages it frees, as :data:`LANE_ALLOCATORS` makes glibc do."""
PARENT_CHECK_SECONDS = 1.0
"""How often a lane looks whether its caller still lives, where the system gives no process handle (pidfd)."""

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
            malloc.system_jemalloc()  # looked up before the environment is withheld (it may start ldconfig)
            with withheld_from_children(), _allocators_set():
                forkserver.ensure_running()
        _started = True


def lane_allocators() -> dict[str, str]:
    """:data:`LANE_ALLOCATORS`, and the machine's jemalloc preloaded as the lanes' ``malloc`` (with
    :data:`JEMALLOC_CONF`) where :func:`maintd.execution.malloc.preload` finds it: not when the caller set
    ``LD_PRELOAD`` (even empty), whose preload the lanes inherit instead."""
    found = malloc.preload()
    return {**LANE_ALLOCATORS, **({"LD_PRELOAD": found, "MALLOC_CONF": JEMALLOC_CONF} if found else {})}


@contextlib.contextmanager
def _allocators_set() -> Iterator[None]:
    """``os.environ`` with :func:`lane_allocators` where unset, while the fork server starts; put back afterwards."""
    wanted = lane_allocators()
    added = [k for k in wanted if k not in os.environ]
    os.environ.update({k: wanted[k] for k in added})
    try:
        yield
    finally:
        for k in added:
            os.environ.pop(k, None)


def processes_can_open(uri: str) -> bool:
    """Whether a child process can run units of the table at ``uri`` as this process would: this process knows
    its interpreter (an embedded one may not: ``sys.executable`` empty), and the scheme's storage is maintd's own
    (a child has no storage registered in this process only)."""
    return bool(sys.executable) and is_builtin_storage(uri)


class _LaneContext:
    """The ``multiprocessing`` context of :data:`CONTEXT` (all of it, by delegation), keeping the process it starts
    for a lane's executor: the lane kills it at a timeout and reads its exit status when it dies (the executor
    reports neither)."""

    def __init__(self) -> None:
        self.base = _context()
        self.process: Any = None

    def Process(self, *args: Any, **kwargs: Any) -> Any:  # the context API's name
        self.process = self.base.Process(*args, **kwargs)
        return self.process

    def __getattr__(self, name: str) -> Any:
        return getattr(self.base, name)


def _lane_started(caller: int) -> None:
    """In a lane's process: end when ``caller`` (the process whose runs it serves) has ended. The fork server,
    its parent, does not end first: every process it forks holds its pipe of life open."""
    def watch() -> None:
        try:
            fd = os.pidfd_open(caller)  # readable once the process has ended
        except OSError:  # no pidfd here: look every PARENT_CHECK_SECONDS
            while _exists(caller):
                time.sleep(PARENT_CHECK_SECONDS)
        else:
            select.select([fd], [], [])
        os._exit(0)

    threading.Thread(target=watch, name="maintd-lane-caller", daemon=True).start()


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        pass
    return True


@dataclass(eq=False)
class _Lane:
    """One warm process that runs packs one at a time (an executor of one process)."""

    executor: ProcessPoolExecutor
    context: _LaneContext
    idle_since: float = field(default_factory=time.monotonic)

    @classmethod
    def start(cls) -> _Lane:
        if not _started:
            start_fork_server()  # a library caller's first run: the server gets the withheld environment too
        ctx = _LaneContext()
        return cls(ProcessPoolExecutor(1, mp_context=cast(BaseContext, ctx), initializer=_lane_started,
                                       initargs=(os.getpid(),)), ctx)

    @property
    def pid(self) -> int | None:
        return getattr(self.context.process, "pid", None)

    def alive(self) -> bool:
        process = self.context.process
        return process is None or process.is_alive()

    def how_it_ended(self) -> str:
        """How the process that died ended (waiting for its status a few seconds at most).

        The fork server reports a child's exit status once, to whichever thread reads it first. The executor's own
        thread reads it while it cleans up after the death, which it does after failing the pack's future. So that
        thread is let finish first (``shutdown``): a reader racing it would find the report gone, and exit code 255.
        """
        self.executor.shutdown(wait=True)
        process = self.context.process
        if process is not None:
            process.join(5)
        code = process.exitcode if process is not None else None
        return f"killed by signal {-code}" if code is not None and code < 0 else f"exit code {code}"

    def kill(self) -> None:
        """Kill the process (gone when this returns) and close the executor. One known to have ended is not sent the
        signal: the fork server has reaped it, and its pid may be another process's by now."""
        if self.pid is not None and self.context.process.exitcode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
            self.context.process.join(5)
        self.executor.shutdown(wait=False, cancel_futures=True)


_lanes: list[_Lane] = []
"""Idle lanes, the most recently used last."""
_reaper: threading.Timer | None = None


def _take_lane() -> _Lane:
    with _LOCK:
        while _lanes:
            lane = _lanes.pop()
            if lane.alive():
                return lane
            lane.kill()
    return _Lane.start()


def _give_back(lane: _Lane) -> None:
    global _reaper
    with _LOCK:
        lane.idle_since = time.monotonic()
        _lanes.append(lane)
        if _reaper is None:
            _reaper = _reap_after(IDLE_SECONDS)


def _end_idle_lanes() -> None:
    """End the lanes idle for :data:`IDLE_SECONDS`; look again when the next one is due."""
    global _reaper
    with _LOCK:
        now = time.monotonic()
        old = [lane for lane in _lanes if now - lane.idle_since >= IDLE_SECONDS]
        _lanes[:] = [lane for lane in _lanes if lane not in old]
        _reaper = _reap_after(max(0.0, IDLE_SECONDS - (now - _lanes[0].idle_since))) if _lanes else None
    _close(old)


def _reap_after(seconds: float) -> threading.Timer:
    timer = threading.Timer(seconds, _end_idle_lanes)
    timer.daemon = True
    timer.start()
    return timer


def _close(lanes: list[_Lane]) -> None:
    for lane in lanes:
        lane.executor.shutdown(wait=True)


def end_lanes() -> None:
    """End every idle lane now (the daemon's stop; tests). A lane running a pack is given back after it, and
    ends once idle."""
    global _reaper
    with _LOCK:
        old = list(_lanes)
        _lanes.clear()
        if _reaper is not None:
            _reaper.cancel()
            _reaper = None
    _close(old)


def lane_pids() -> list[int]:
    """Pids of the idle lanes' processes (tests, the daemon's process census)."""
    with _LOCK:
        return [pid for lane in _lanes if (pid := lane.pid) is not None]


def _run_pack(wire: list[str], request: dict[str, Any], attempt: int) -> list[str]:
    """A pack in a lane: what a Spark task runs (:func:`~maintd.execution.spark.run_pack_in_worker`), its results
    as JSON strings. What Arrow freed stays with the lane for its next pack (:data:`LANE_ALLOCATORS`)."""
    from maintd.execution.spark import run_pack_in_worker
    from maintd.storage.options import CarriedStorage, StorageOptions

    uri = request.get("uri")
    storage = CarriedStorage(uri, StorageOptions.of(request.get("options") or {})) if uri else None
    return run_pack_in_worker(wire, threads=int(request.get("threads") or 1), freeze=False, storage=storage,
                              attempt=attempt, release=False)


class ProcessBackend:
    """Packs run in lanes (warm processes of the fork server), ``workers`` at once, each with a timeout."""

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
        lane = _take_lane()
        try:
            future = lane.executor.submit(_run_pack, wire, self.request, attempt)
        except BrokenProcessPool:  # it died while idle
            lane.kill()
            lane = _Lane.start()
            future = lane.executor.submit(_run_pack, wire, self.request, attempt)
        try:
            out = self._answer(lane, future, time.monotonic() + timeout, timeout)
        except BaseException as exc:  # a lost, hung or cancelled pack's lane is killed; after a failure it serves on
            if (not isinstance(exc, Exception) or isinstance(exc, UnitLostError) or self._cancelled.is_set()
                    or not lane.alive()):
                lane.kill()
            else:
                _give_back(lane)
            raise
        _give_back(lane)
        return out

    def _answer(self, lane: _Lane, future: Future[list[str]], deadline: float, timeout: float) -> list[str]:
        """The lane's results, waiting until ``deadline`` (and no longer once the run is cancelled)."""
        while True:
            left = deadline - time.monotonic()
            if self._cancelled.is_set():
                raise RuntimeError("cancelled: the run was abandoned")
            if left <= 0:
                raise UnitLostError(f"local process {lane.pid} did not finish its pack within {timeout:g} s "
                                    "(spark.maintd.task.timeout) and was killed")
            done, _ = wait([future], min(left, 1.0), return_when=FIRST_COMPLETED)
            if done:
                try:
                    return future.result()
                except BrokenProcessPool:
                    raise UnitLostError(f"local process {lane.pid} ended while it ran its pack "
                                        f"({lane.how_it_ended()})") from None

    def cancel(self) -> None:
        """Packs of this run not started yet are not started, and running ones are killed (their files are
        deleted when their units are reported failed)."""
        self._cancelled.set()

    def describe(self) -> tuple[str | None, str | None]:
        return None, None


__all__ = ["ProcessBackend", "UnitLostError", "end_lanes", "lane_allocators", "lane_pids", "pack_timeout",
           "processes_can_open", "start_fork_server"]
