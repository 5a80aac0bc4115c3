"""Running units as Spark tasks that follow the cluster, with results as each Spark task finishes.

**Packs.** Units are packed into Spark tasks of about ``task_input_bytes`` of input each (balanced by input
bytes plus a fixed cost per file, biggest first), and into at least one Spark task per core the cluster has
when the run starts. A large run has as many Spark tasks as its input calls for, and a small one still uses
every core while paying a Python Spark task's fixed cost once per core rather than once per bucket.

**Jobs.** Each pack runs as its own Spark job (one task), submitted from a driver thread, with about two Spark
tasks in flight per core the cluster has *now* (read again whenever a job ends), so executors that join get
work and executors that leave hold none back. A job's results reach the driver when its task ends, and a job
that fails loses only its own pack. Each job has a job group of its own: an abandoned run cancels what still
runs, and a job still running after :func:`~maintd.execution.local.pack_timeout` is cancelled alone and runs
once more; a second timeout fails its units.

**Attempts.** Spark retries a failed task in a new attempt, which writes under its own file names. When a
pack's job ends, the files of every attempt but the accepted one are deleted (:func:`remove_attempts`); what
cannot be listed or deleted is left to orphan cleanup.

docs/architecture.md ("Plan, execute, commit") gives the reasons.
"""

from __future__ import annotations

import functools
import math
import threading
import uuid
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any, Protocol

from loguru import logger

from maintd.execution.budget import Budget, Cost, Ticket, pack_cost, result_cost
from maintd.execution.output import name_prefix
from maintd.execution.prior import PRIOR_PREFIX
from maintd.execution.rewrite import run_pack
from maintd.execution.spark import is_connect, run_pack_in_worker, ships_storage_options
from maintd.execution.specs import ExecutionOptions, TaskResult, TaskSpec
from maintd.storage import Storage, carry_storage
from maintd.table.files.datafiles import data_file_path

FILE_COST_BYTES = 64 << 10
"""Fixed cost of one input file, in bytes of input, when balancing packs: opening and decoding a small file
counts as much as reading 64 KiB."""
MAX_JOBS = 64
"""Spark jobs in flight at once (driver threads); with more slots than that a job carries several packs."""
TICK_SECONDS = 1.0


class Backend(Protocol):
    """Where packs run: Spark (classic or Connect) or threads of this process."""

    def cores(self) -> int:
        """Cores able to run a task now."""

    def slots(self) -> int:
        """Spark tasks to keep in flight now."""

    def run(self, packs: Sequence[Sequence[TaskSpec]]) -> list[TaskResult]:
        """Run packs of units, one task each, and return every unit's result (a backend that crosses a
        process boundary carries them as JSON; one in this process passes the objects)."""

    def cancel(self) -> None:
        """Cancel what is running (best effort)."""

    def describe(self) -> tuple[str | None, str | None]:
        """(master, application id)."""


class LocalBackend:
    """Packs run in threads of this process (tables whose storage a child process would not find, tests, or
    ``spark.maintd.inProcess.workers=threads``), each with the timeout of :func:`~maintd.execution.local.pack_timeout`
    (``timeout`` overrides it). A thread cannot be killed, so a pack still running then is reported failed and its
    thread left to end on its own (whatever it writes afterwards is never committed; orphan cleanup takes it)."""

    engine = "in-process"

    def __init__(self, threads: int = 2, pack_threads: int = 1, timeout: float | None = None) -> None:
        self.threads = threads
        self.pack_threads = pack_threads
        self.timeout = timeout

    def cores(self) -> int:
        return self.threads

    def slots(self) -> int:
        return self.threads  # nothing queues behind a thread: more in flight would only share the cores

    def run(self, packs: Sequence[Sequence[TaskSpec]]) -> list[TaskResult]:
        return [r for p in packs for r in self._run_pack(list(p))]

    def _run_pack(self, pack: list[TaskSpec]) -> list[TaskResult]:
        from maintd.execution.local import UnitLostError, pack_timeout

        timeout = self.timeout or pack_timeout(pack, ExecutionOptions())
        out: list[list[TaskResult]] = []
        worker = threading.Thread(target=lambda: out.append(run_pack(pack, self.pack_threads)), daemon=True,
                                  name="maintd-pack")
        worker.start()
        worker.join(timeout)
        if not out:
            units = ", ".join(f"{s.task_id}#{s.unit}" for s in pack)
            logger.error("a pack ({}) did not finish within {:g} s in a thread of this process, which cannot be "
                         "killed; its units fail and the thread is left to end on its own", units, timeout)
            raise UnitLostError(f"not finished within {timeout:g} s (spark.maintd.task.timeout)")
        return out[0]

    def cancel(self) -> None:
        return None

    def describe(self) -> tuple[str | None, str | None]:
        return None, None


class SparkBackend:
    """Packs run as Spark jobs of a session (classic: ``parallelize``; Connect: ``mapInArrow``)."""

    engine = "spark"

    def __init__(self, spark: Any, options: ExecutionOptions, description: str, table_uri: str | None = None) -> None:
        self.spark = spark
        self.connect = is_connect(spark)
        self.group = f"maintd-{uuid.uuid4().hex[:12]}"
        """Each job of the run has a group of its own below this one (``<group>-<n>``), cancelled at its timeout."""
        self._groups: list[str] = []
        self._lock = threading.Lock()
        self.options = options
        self.description = description
        # Executors on other machines see neither this process's storage options nor its environment: the
        # task function carries the table's resolved options (their repr hides secrets), its credentials only
        # when asked (or to a local master's workers): an executor's own role or environment supplies them.
        carried = carry_storage(table_uri, ships_storage_options(spark, options)) if table_uri else None
        self.fn = functools.partial(run_pack_in_worker, threads=options.pack_threads, freeze=options.freeze_zip_caches,
                                    storage=carried)

    def cores(self) -> int:
        if self.connect:
            return 2
        return max(1, int(self.spark.sparkContext.defaultParallelism))

    def slots(self) -> int:
        return 2 * self.cores()  # a task queued per core: no core waits for the driver between two tasks

    def run(self, packs: Sequence[Sequence[TaskSpec]]) -> list[TaskResult]:
        wire = [[s.model_dump_json() for s in p] for p in packs]
        if self.connect:
            out = _run_connect(self.spark, wire, self.fn)
            return [TaskResult.model_validate_json(x) for x in out]
        from maintd.execution.local import ATTEMPTS, UnitLostError, pack_timeout

        timeout = sum(pack_timeout(p, self.options) for p in packs)
        for attempt in range(ATTEMPTS):
            out, timed_out = self._job(wire, timeout)
            if not timed_out:
                # a job run again after a timeout: its results say so, so the timed-out job's files are deleted
                return [r if not attempt else r.model_copy(update={"attempt": max(r.attempt, 1)})
                        for r in map(TaskResult.model_validate_json, out)]
            units = ", ".join(f"{s.task_id}#{s.unit}" for p in packs for s in p)
            if attempt + 1 < ATTEMPTS:
                logger.warning("a Spark job ({}) did not finish within {:g} s (spark.maintd.task.timeout) and was "
                               "cancelled, its Python workers killed; it runs again", units, timeout)
            else:
                logger.error("a Spark job ({}) did not finish within {:g} s again and was cancelled; its units fail",
                             units, timeout)
        raise UnitLostError(f"did not finish within {timeout:g} s on Spark (spark.maintd.task.timeout), twice")

    def _job(self, wire: list[list[str]], timeout: float) -> tuple[list[str], bool]:
        """One Spark job of the packs in a job group of its own, cancelled (its tasks killed) after ``timeout``;
        returns its results and whether it timed out (then none)."""
        sc = self.spark.sparkContext
        with self._lock:
            group = f"{self.group}-{len(self._groups)}"
            self._groups.append(group)
        expired = threading.Event()

        def expire() -> None:
            expired.set()
            sc.cancelJobGroup(group)

        timer = threading.Timer(timeout, expire)
        timer.daemon = True
        sc.setJobGroup(group, self.description, interruptOnCancel=True)
        timer.start()
        try:
            return sc.parallelize(wire, numSlices=len(wire)).flatMap(self.fn).collect(), False
        except Exception:
            if expired.is_set():
                return [], True
            raise
        finally:
            timer.cancel()

    def cancel(self) -> None:
        if not self.connect:
            with self._lock:
                groups = list(self._groups)
            for group in groups:
                self.spark.sparkContext.cancelJobGroup(group)

    def describe(self) -> tuple[str | None, str | None]:
        from maintd.execution.spark import spark_info

        return spark_info(self.spark)


def _run_connect(spark: Any, packs: list[list[str]], run: Any) -> list[str]:
    import pyarrow as pa

    def run_batches(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for b in batches:
            ids = b.column(0).to_pylist()
            yield pa.RecordBatch.from_pydict({"result": [r for i in ids for r in run(packs[i])]})

    n = len(packs)
    df = spark.range(0, n, 1, numPartitions=n).mapInArrow(run_batches, "result string")
    return [row[0] for row in df.collect()]


def task_cost(spec: TaskSpec) -> int:
    """The relative cost of a unit, for balancing packs: input bytes plus a fixed cost per file."""
    return sum(f.bytes for f in spec.inputs) + FILE_COST_BYTES * len(spec.inputs)


def pack_count(specs: Sequence[TaskSpec], task_input_bytes: int, cores: int) -> int:
    """Spark tasks for ``specs``: as many as the input calls for, at least one per core, at most one per unit."""
    total = sum(task_cost(s) for s in specs)
    return max(1, min(len(specs), max(cores, math.ceil(total / max(1, task_input_bytes)))))


def pack_tasks(specs: Sequence[TaskSpec], slices: int) -> list[list[int]]:
    """Split units (by index) into at most ``slices`` packs of about equal cost, costliest packs first.

    Longest-processing-time-first: each unit, from the costliest, goes to the pack with the least cost
    so far. Deterministic; packs are never empty.
    """
    n = max(1, min(slices, len(specs)))
    costs = [task_cost(s) for s in specs]
    packs: list[list[int]] = [[] for _ in range(n)]
    loads = [0] * n
    for i in sorted(range(len(specs)), key=lambda i: (-costs[i], i)):
        j = min(range(n), key=lambda j: (loads[j], j))
        packs[j].append(i)
        loads[j] += costs[i]
    order = sorted(range(n), key=lambda j: (-loads[j], j))
    return [packs[j] for j in order if packs[j]]


def run_units(specs: Sequence[TaskSpec], backend: Backend, options: ExecutionOptions, *,
              on_result: Callable[[TaskResult], None], on_tick: Callable[[], float | None] = lambda: None,
              stop: Callable[[], bool] = lambda: False, storage: Storage | None = None,
              budget: Budget | None = None, priority: float = 0.0) -> int:
    """Run every unit and report each result as its Spark task ends; returns the number of Spark tasks.

    Args:
        specs: the units.
        backend: where they run.
        options: ``task_input_bytes`` sizes the packs.
        on_result: called in the calling thread with each unit's result.
        on_tick: called at least every second; returns the seconds until it wants to be called again.
        stop: when true, no further pack starts and running ones are cancelled (their units fail).
        storage: the table's storage, to delete the files of attempts whose result was not accepted.
        budget: the daemon's budget (:mod:`maintd.execution.budget`): packs fit its bursts and start once
            admitted. None: no budget.
        priority: the place of this run's packs in the budget's line (higher first).
    """
    if not specs:
        return 0
    budget = budget if budget is not None and budget.limited else None
    cap = budget.max_pack_bytes() if budget is not None else None
    input_bytes = min(options.task_input_bytes, cap) if cap else options.task_input_bytes
    packs = [[specs[i] for i in p] for p in pack_tasks(specs, pack_count(specs, input_bytes, backend.cores()))]
    queue = deque(packs)
    running: dict[Future[list[TaskResult]], list[list[TaskSpec]]] = {}
    admitted: dict[Future[list[TaskResult]], Cost] = {}
    pending: tuple[list[list[TaskSpec]], Ticket | None] | None = None
    cancelled = False
    with ThreadPoolExecutor(MAX_JOBS, thread_name_prefix="maintd-job") as pool:
        while queue or running or pending:
            if stop() and not cancelled:
                cancelled = True
                backend.cancel()
            held: float | None = None
            while (queue or pending) and not cancelled and _in_flight(running) < backend.slots():
                if pending is None:
                    batch = [queue.popleft() for _ in range(min(len(queue), _per_job(backend.slots())))]
                    cost = pack_cost(s for p in batch for s in p)
                    pending = batch, budget.ticket(cost, priority) if budget is not None else None
                batch, ticket = pending
                if budget is not None and ticket is not None:
                    held = budget.try_admit(ticket) or None
                    if held is not None:
                        break
                pending = None
                fut = pool.submit(backend.run, batch)
                running[fut] = batch
                if ticket is not None:
                    admitted[fut] = ticket.cost
            if cancelled:
                if pending is not None:
                    if budget is not None and pending[1] is not None:
                        budget.withdraw(pending[1])
                    queue.extendleft(reversed(pending[0]))
                    pending = None
                for p in queue:
                    _report_failed(p, "not started: the run was abandoned", on_result)
                queue.clear()
            wait_s = on_tick()
            timeout = min(x for x in (TICK_SECONDS, wait_s, held) if x is not None)
            done, _ = wait(running, timeout=max(0.0, timeout), return_when=FIRST_COMPLETED)
            for fut in done:
                batch = running.pop(fut)
                results = _finish(batch, fut, on_result, storage, backend)
                estimate = admitted.pop(fut, None)
                if budget is not None and estimate is not None and results:  # a failed job keeps its estimate
                    budget.settle(estimate, sum((result_cost(s, r) for s, r in results), Cost()))
    return len(packs)


def _in_flight(running: dict[Future[list[TaskResult]], list[list[TaskSpec]]]) -> int:
    return sum(len(b) for b in running.values())


def _per_job(slots: int) -> int:
    return max(1, math.ceil(slots / MAX_JOBS))


def _finish(batch: list[list[TaskSpec]], fut: Future[list[TaskResult]], on_result: Callable[[TaskResult], None],
            storage: Storage | None, backend: Backend | None = None) -> list[tuple[TaskSpec, TaskResult]]:
    """Report the results of a finished job's units (failed ones when the job failed); returns them."""
    specs = [s for p in batch for s in p]
    try:
        results = fut.result()
    except Exception as exc:  # the job failed: a task out of retries, or cancelled
        where = "Spark job" if getattr(backend, "engine", None) == "spark" else "pack run in process"
        logger.warning("a {} of {} unit(s) failed: {}", where, len(specs), _first_line(exc))
        for p in batch:
            _report_failed(p, f"{where} failed: {type(exc).__name__}: {_first_line(exc)}", on_result, storage)
        return []
    by_key = {(r.task_id, r.unit): r for r in results}
    reported = []
    for s in specs:
        r = by_key.get((s.task_id, s.unit)) or _lost(s, "no result came back for this unit")
        if storage is not None and (not r.ok or r.attempt > 0):
            remove_attempts(storage, s, keep=set(r.written))
        on_result(r)
        reported.append((s, r))
    return reported


def _report_failed(pack: Sequence[TaskSpec], error: str, on_result: Callable[[TaskResult], None],
                   storage: Storage | None = None) -> None:
    for s in pack:
        if storage is not None:
            remove_attempts(storage, s, keep=set())
        on_result(_lost(s, error))


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else ""


def _lost(spec: TaskSpec, error: str) -> TaskResult:
    return TaskResult(task_id=spec.task_id, kind=spec.kind, ok=False, inputs=tuple(f.path for f in spec.inputs),
                      unit=spec.unit, units=spec.units, token=spec.token, error=error)


def remove_attempts(storage: Storage, spec: TaskSpec, keep: set[str]) -> list[str]:
    """Delete the files that attempts of ``spec`` wrote, except ``keep`` (the accepted attempt's); returns them."""
    kind = "base" if spec.kind == "compact" else "delta"
    level = None if kind == "base" else spec.target_level
    probe = data_file_path(spec.metadata, spec.partition, spec.bucket, kind, level, unique="0" * 32)  # type: ignore[arg-type]
    directory = probe.rsplit("/", 1)[0]
    prefixes = (f"{directory}/{name_prefix(kind, level, spec.token)}",  # type: ignore[arg-type]
                f"{directory}/{PRIOR_PREFIX}{spec.token}")
    removed = []
    try:
        for f in storage.list_dir(directory):
            path = f.path if "/" in f.path else f"{directory}/{f.path}"
            if path.startswith(prefixes) and path not in keep:
                storage.delete(path)
                removed.append(path)
    except Exception as exc:  # orphan cleanup will find them
        logger.warning("files of failed attempts of {} left for orphan cleanup: {}", spec.task_id, exc)
    if removed:
        logger.info("deleted {} file(s) of failed attempts of task {} (unit {})", len(removed), spec.task_id, spec.unit)
    return removed
