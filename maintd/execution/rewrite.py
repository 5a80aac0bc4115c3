"""The rewrite of one unit inside a Spark task (or in process): pyarrow only, no Spark.

A unit reads its input files restricted to its key range, merges them and writes its output files:

* ``cluster``: every row version kept, sorted by (primary key, version), into one DeltaFile at the
  target level carrying ``_maintd_op`` and ``_maintd_version``.
* ``compact``: the greatest version per key, deletes dropped, into BaseFiles of about
  ``target_file_bytes`` each (:mod:`maintd.execution.output`).

Several units may share one Spark task (a *pack*, :func:`run_pack_json`): each is still rewritten,
reported and, on failure, cleaned up on its own.

**Memory.** A unit stays within ``task_memory_bytes`` (rows, read buffers and merge copies; the worker's
interpreter and libraries come on top), whatever the size of its inputs, in one of three modes.

* *memory*: inputs whose estimated decoded size fits are fetched whole and merged in one step (checked
  against the footers and while decoding: past the limit the unit streams instead).
* *stream*: each input is streamed in bounded record batches through a k-way merge
  (:func:`maintd.execution.merge.merge_streams`);
* *spill*: when even the open readers of all inputs would not fit, groups of inputs are merged into sorted
  runs on local disk (``SPARK_LOCAL_DIRS``, else the temporary directory), then the runs are merged. A
  compaction's runs keep their delete rows; one that stores prior rows keeps every row version
  (:mod:`maintd.execution.prior`).

The shares of the budget are fixed below and leave about a quarter for the allocator and Python objects.
docs/architecture.md ("Memory") explains the modes and the shares.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from maintd.execution.inputs import (
    Layout,
    StreamSource,
    TooLargeError,
    decoded_bytes,
    dictionary_candidates,
    fetch_all,
    file_stream,
    open_source,
    partition_constants,
    read_all,
    unit_dictionaries,
)
from maintd.execution.lookup import prior_writer
from maintd.execution.merge import in_version_order, integer_key, merge_chunk, merge_streams
from maintd.execution.output import Outputs
from maintd.execution.prior import PriorWriter
from maintd.execution.specs import TaskResult, TaskSpec
from maintd.storage import Storage, storage_for_uri
from maintd.table.files.datafiles import data_file_errors
from maintd.table.log.actions import AddFile

EXPANSION = 6
"""Estimated in-memory bytes (Arrow, plus the merge copy) per byte of compressed Parquet input: the cheap
first test of the memory path, before any footer is read."""
MEMORY_PATH_SHARE = 0.7
"""The memory path needs fetched bytes + 2 x decoded bytes within this share of the budget."""
SOURCES_SHARE = 0.3
"""The inputs of one merge pass: open readers (pages, dictionaries, read buffers) of the streamed ones, the
rows of the small ones read whole. More inputs are merged in passes through spilled runs."""
BUFFER_SHARE = 0.06
"""Rows buffered ahead in the streamed inputs of one merge pass (at most half a chunk, so one merge step
never gathers much more than a chunk)."""
CHUNK_SHARE = 0.12
"""One chunk of gathered rows; with a step's overshoot (half a chunk) and its merged copy, three chunks."""
ROW_GROUP_SHARE = 0.04
"""Rows the writer gathers into one row group. The shares add up to about three quarters of the budget:
the rest is for the allocator's slack and Python objects."""
ROW_GROUP_BYTES = 16 << 20
"""At most this many compressed bytes per output row group (finer key index, smaller writer buffers)."""
MIN_BUFFER_ROWS = 512
SPILL_PAGE = 64 << 10


class InjectedFaultError(RuntimeError):
    """Raised by a task that was told to fail (tests of failure handling)."""


# -- entry points ------------------------------------------------------------------------------------------------


def run_task_json(spec_json: str) -> str:
    """Entry point of a Spark task: spec JSON in, result JSON out; never raises."""
    return _run_json(spec_json).model_dump_json()


def run_pack_json(specs_json: Sequence[str], threads: int = 1, attempt: int | None = None) -> list[str]:
    """Entry point of a Spark task running a pack of units: one result JSON per spec; never raises."""
    return [r.model_dump_json() for r in run_pack(list(specs_json), threads, attempt)]


def run_pack(specs: Sequence[TaskSpec | str], threads: int = 1, attempt: int | None = None) -> list[TaskResult]:
    """Run several units in one process, ``threads`` at a time, in the order given; never raises.

    A unit failing (or even its spec failing to parse) is reported in its own result; the other
    units of the pack are unaffected. Run one at a time, the units' output files are made durable
    together once the last one is done (:class:`_Unsynced`), before any result leaves the pack.
    ``attempt``: this run's attempt at the pack (None: Spark's, :func:`current_attempt`).
    """
    if threads <= 1 or len(specs) <= 1:
        unsynced = _Unsynced()
        results = [_run_json(s, unsynced, attempt) if isinstance(s, str) else
                   run_task(s, unsynced=unsynced, attempt=attempt) for s in specs]
        return unsynced.settle(results)
    with ThreadPoolExecutor(min(threads, len(specs))) as pool:
        return list(pool.map(lambda s: _run_json(s, attempt=attempt) if isinstance(s, str) else
                             run_task(s, attempt=attempt), specs))


class _Unsynced:
    """The output files of a pack's finished units, being made durable behind the next unit's work.

    Each finished unit's files are synced (:meth:`Storage.make_durable_many`: the files in parallel, then
    their directories) on a background thread while the next unit of the pack computes: a sync waits on the
    disk, not the processor, so the pack waits only for the last unit's syncs. No result leaves the pack
    before :meth:`settle` has waited for every sync. A unit whose files cannot be made durable is reported
    as failed and its files deleted: no commit may name them.
    """

    def __init__(self) -> None:
        self._pool: ThreadPoolExecutor | None = None
        self.pending: dict[tuple[str, int], tuple[Storage, Future[None]]] = {}
        """(task id, unit) of a finished unit -> its storage and the sync of its files."""

    def add(self, storage: Storage, spec: TaskSpec, paths: Sequence[str]) -> None:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="maintd-sync")
        self.pending[(spec.task_id, spec.unit)] = (storage, self._pool.submit(storage.make_durable_many, list(paths)))

    def settle(self, results: list[TaskResult]) -> list[TaskResult]:
        """``results`` once the pending units' files are durable, with the units whose files could not be made
        durable failed."""
        out = []
        for r in results:
            got = self.pending.get((r.task_id, r.unit))
            if got is not None:
                storage, sync = got
                try:
                    sync.result()
                except Exception as exc:
                    for path in r.written:
                        with contextlib.suppress(Exception):  # else orphan cleanup takes it: no commit names it
                            storage.delete(path)
                    r = r.model_copy(update={
                        "ok": False, "adds": (), "priors": (),
                        "error": f"output files could not be made durable: {type(exc).__name__}: {exc}"})
            out.append(r)
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        return out


def _run_json(spec_json: str, unsynced: _Unsynced | None = None, attempt: int | None = None) -> TaskResult:
    started = time.monotonic()
    try:
        spec = TaskSpec.model_validate_json(spec_json)
    except Exception as exc:  # a spec the driver wrote but this worker cannot read (version skew)
        try:
            doc = json.loads(spec_json)
            task_id, kind = str(doc["task_id"]), doc["kind"]
            inputs = tuple(str(f["path"]) for f in doc.get("inputs", ()))
        except Exception:
            task_id, kind, inputs = "?", "cluster", ()
        return TaskResult(task_id=task_id, kind=kind if kind in ("cluster", "compact") else "cluster", ok=False,
                          inputs=inputs, seconds=time.monotonic() - started,
                          error=f"invalid task spec: {type(exc).__name__}: {exc}")
    return run_task(spec, unsynced=unsynced, attempt=attempt)


def task_context() -> Any:
    """The running Spark task's ``TaskContext``, or None outside a Spark task.

    A Spark Python worker has imported pyspark before it runs any task; a process that has not is running
    units itself (in process), and must not pay for importing pyspark (about a second) to learn that.
    """
    pyspark = sys.modules.get("pyspark")
    return None if pyspark is None else pyspark.TaskContext.get()


def current_attempt() -> int:
    """The Spark attempt number of the running task (0 outside Spark)."""
    ctx = task_context()
    return int(ctx.attemptNumber()) if ctx is not None else 0


def release_memory() -> None:
    """Return the memory Arrow freed to the system, after each chunk of a streamed merge and after each Spark
    task, so a worker's RSS follows the rows it still holds (see ``spark.executorEnv.ARROW_DEFAULT_MEMORY_POOL``
    in :mod:`maintd.execution.spark`)."""
    pa.default_memory_pool().release_unused()


def run_task(spec: TaskSpec, *, unsynced: _Unsynced | None = None, attempt: int | None = None) -> TaskResult:
    """Rewrite one unit. A failure is reported in the result, and the unit's partial output deleted.

    ``unsynced``: leave the output files to be made durable with the pack's (the default syncs each).
    ``attempt``: the attempt number its files and result carry (None: Spark's, :func:`current_attempt`).
    """
    started = time.monotonic()
    attempt = current_attempt() if attempt is None else attempt
    out: Outputs | None = None
    prior: PriorWriter | None = None
    phases: dict[str, float] = {}
    common: dict[str, Any] = {"task_id": spec.task_id, "kind": spec.kind, "inputs": _paths(spec), "unit": spec.unit,
                              "units": spec.units, "token": spec.token, "attempt": attempt}
    try:
        storage = storage_for_uri(spec.table_uri)
        group_rows = _row_group_rows(spec)
        out = Outputs(storage, spec, row_group_rows=group_rows, attempt=attempt, durable=unsynced is None)
        prior = prior_writer(storage, spec, Layout(spec.metadata).full_schema, row_group_rows=group_rows,
                            attempt=attempt, durable=unsynced is None)
        rows_read, mode = _rewrite(storage, spec, out, prior, phases)
        adds = out.close()
        written = prior.close()
        priors = (written,) if written is not None else ()
        if unsynced is not None:
            unsynced.add(storage, spec, [*(a.path for a in adds), *(p.path for p in priors)])
    except Exception as exc:  # reported, not raised: one failing bucket must not fail the others
        if out is not None:
            out.discard()
        if prior is not None:
            prior.discard()
        return TaskResult(**common, ok=False, seconds=time.monotonic() - started,
                          error=f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=5)}")
    return TaskResult(**common, ok=True, adds=adds, priors=priors, bytes_read=sum(f.bytes for f in spec.inputs),
                      rows_read=rows_read,
                      rows_written=sum(a.rows for a in adds), bytes_written=sum(a.bytes for a in adds),
                      seconds=time.monotonic() - started, mode=mode, phases=phases)  # type: ignore[arg-type]


def _paths(spec: TaskSpec) -> tuple[str, ...]:
    return tuple(f.path for f in spec.inputs)


def fits_in_memory(spec: TaskSpec) -> bool:
    """The cheap first test of the memory path, from the inputs' compressed sizes."""
    return sum(f.bytes for f in spec.inputs) * EXPANSION <= spec.task_memory_bytes


def _row_group_rows(spec: TaskSpec) -> int:
    rows = max(1, sum(f.rows for f in spec.inputs))
    packed = max(1, sum(f.bytes for f in spec.inputs)) / rows  # compressed bytes per row
    cap = min(ROW_GROUP_BYTES, spec.task_memory_bytes * ROW_GROUP_SHARE / EXPANSION, spec.target_file_bytes / 4)
    return int(max(1024, min(1 << 20, cap / packed)))


# -- the rewrite -------------------------------------------------------------------------------------------------


def _rewrite(storage: Storage, spec: TaskSpec, out: Outputs, prior: PriorWriter, phases: dict[str, float]
             ) -> tuple[int, str]:
    """Merge the unit's inputs into ``out`` (and their prior rows into ``prior``); returns (rows read, mode)."""
    keys = list(spec.metadata.primary_key)
    files, disjoint = in_version_order(spec.inputs)
    clock = _Clock(phases)
    read = _read_whole(storage, spec, files) if fits_in_memory(spec) else None
    stream = _Streaming(storage, spec, files, disjoint, every_version=prior.enabled) if read is None else None
    whole, constants = read if read is not None else (None, stream.constants)  # type: ignore[union-attr]
    if constants:  # none: no input has a row, and nothing is written
        out.set_constants(constants)
        prior.set_constants(constants)
    chunks: Iterator[pa.Table] = iter(whole) if whole is not None else stream.chunks()  # type: ignore[union-attr]
    del whole, read
    clock.lap("read")
    rows_read = 0
    try:
        for chunk in chunks:
            clock.lap("read")
            rows_read += chunk.num_rows
            if prior.enabled:
                prior.take(chunk)
                clock.lap("prior")
            merged = merge_chunk(chunk, keys, spec.kind, version_ordered=disjoint)
            del chunk
            clock.lap("merge")
            out.write(merged)
            del merged
            if stream is not None:
                release_memory()
            clock.lap("write")
            _fault(spec, out)
        out.flush()  # the rows still gathered for a row group: part of the write
        clock.lap("write")
    finally:
        if stream is not None:
            stream.close()
    if stream is None:
        return rows_read, "memory"
    return stream.rows_read, "spill" if stream.passes > 1 else "stream"


def _read_whole(storage: Storage, spec: TaskSpec, files: Sequence[AddFile]
                ) -> tuple[list[pa.Table], dict[str, pa.Array]] | None:
    """The inputs fetched and decoded whole, and the partition columns' values (:func:`partition_constants`),
    or None when their footers say they would not fit."""
    data = fetch_all(storage, files, spec.read_threads, dictionary_candidates(spec.metadata))
    packed = sum(f.bytes for f in files)
    room = spec.task_memory_bytes * MEMORY_PATH_SHARE - packed
    if 2 * sum(decoded_bytes(d) for d in data) > room:
        return None
    dictionaries = unit_dictionaries(spec.metadata, (d.metadata for d in data))
    try:
        rows = read_all(spec.metadata, files, data, spec.decode_threads, spec.key_range, limit=room / 2,
                        dictionaries=dictionaries)
    except TooLargeError:  # decoded larger than the footers said (dictionary-encoded strings): stream
        return None
    return [rows], partition_constants(spec.metadata, data)


class _Streaming:
    """The streamed merge of a unit's inputs, through spilled runs when there are too many inputs."""

    def __init__(self, storage: Storage, spec: TaskSpec, files: Sequence[AddFile], disjoint: bool, *,
                 every_version: bool = False) -> None:
        self.spec = spec
        self.run_kind = "cluster" if every_version else spec.kind
        """How a spilled run merges: as the unit does, or keeping every row version (prior rows)."""
        self.keys = list(spec.metadata.primary_key)
        self.disjoint = disjoint
        self.budget = spec.task_memory_bytes
        columns = Layout(spec.metadata)
        self.numeric = integer_key(columns.schema, self.keys)

        def footer(f: AddFile) -> StreamSource:
            with data_file_errors(storage, f):
                return open_source(storage.full_path(f.path), storage.filesystem, f, columns.columns(f),
                                   self.keys, spec.key_range, optional=columns.added)

        with ThreadPoolExecutor(max(1, min(spec.read_threads, len(files)))) as pool:  # one small read each
            self.sources = list(pool.map(footer, files))
        dictionaries = unit_dictionaries(spec.metadata, (s.metadata for s in self.sources))
        self.layout = Layout(spec.metadata, dictionaries)
        for s in self.sources:
            s.dictionaries = dictionaries
        self.constants = partition_constants(spec.metadata, (s.open() for s in self.sources if s.rows))
        self.passes = 1
        self.rows_read = 0
        self._tmp: tempfile.TemporaryDirectory[str] | None = None

    def chunks(self) -> Iterator[pa.Table]:
        sources = self.sources
        first = True
        while _cost(sources) > self.budget * SOURCES_SHARE and len(sources) > 2:
            sources = self._spill(sources, count=first)
            first = False
            self.passes += 1
        for chunk in self._merge(sources):
            if first:
                self.rows_read += chunk.num_rows
            yield chunk

    def _merge(self, sources: list[StreamSource]) -> Iterator[pa.Table]:
        """One k-way merge pass: buffers share ``BUFFER_SHARE`` of the budget (at least a few hundred rows
        each), read in batches of a quarter buffer (so a wrong row-size estimate overshoots by little);
        chunks are ``CHUNK_SHARE``. Buffer and chunk sizes are measured Arrow bytes."""
        streamed = sum(s.streamed(MIN_BUFFER_ROWS) for s in sources) or 1
        buffer_bytes = self.budget * BUFFER_SHARE / streamed
        streams = []
        for s in sources:
            batch = int(max(64, min(1 << 16, max(buffer_bytes, MIN_BUFFER_ROWS * s.row_bytes) / 4 / s.row_bytes)))
            streams.append(file_stream(s, self.layout, self.keys, batch, self.spec.key_range,
                                       whole=not s.streamed(MIN_BUFFER_ROWS)))
        return merge_streams(streams, self.keys, chunk_bytes=self.budget * CHUNK_SHARE,
                             buffer_bytes=buffer_bytes, numeric=self.numeric)

    def _spill(self, sources: list[StreamSource], *, count: bool) -> list[StreamSource]:
        """Merge consecutive groups of sources (version order kept) into sorted runs on local disk."""
        if self._tmp is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="maintd-spill-", dir=spill_dir())
        runs: list[StreamSource] = []
        for group in _groups(sources, self.budget * SOURCES_SHARE):
            path = str(Path(self._tmp.name) / f"run-{self.passes}-{len(runs)}.parquet")
            with pq.ParquetWriter(path, self.layout.schema, compression="zstd", compression_level=1,
                                  data_page_size=SPILL_PAGE, dictionary_pagesize_limit=SPILL_PAGE) as w:
                for chunk in self._merge(group):
                    if count:
                        self.rows_read += chunk.num_rows
                    merged = merge_chunk(chunk, self.keys, self.run_kind, version_ordered=self.disjoint,
                                         keep_deletes=True)
                    w.write_table(merged, row_group_size=1 << 16)
                    del merged, chunk
                    release_memory()
            runs.append(open_source(path, None, None, None, self.keys, self.spec.key_range, page_bytes=SPILL_PAGE))
        for s in sources:
            if s.spilled:  # a run of an earlier pass, merged: its disk space goes
                with contextlib.suppress(OSError):
                    os.unlink(s.location)
        return runs

    def close(self) -> None:
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None


def _cost(sources: Sequence[StreamSource]) -> float:
    """Memory of merging ``sources`` in one pass with minimal buffers: readers and a few rows, or whole rows."""
    return sum(s.cost(MIN_BUFFER_ROWS) for s in sources)


def _groups(sources: Sequence[StreamSource], limit: float) -> list[list[StreamSource]]:
    """Consecutive groups of at least two sources, each within ``limit`` of :func:`_cost`."""
    groups: list[list[StreamSource]] = [[]]
    for s in sources:
        if len(groups[-1]) >= 2 and _cost([*groups[-1], s]) > limit:
            groups.append([])
        groups[-1].append(s)
    if len(groups) > 1 and len(groups[-1]) == 1:
        groups[-2].append(groups.pop()[0])
    return groups


def spill_dir() -> str | None:
    """Where merge runs are spilled: Spark's local directory of the executor, else the temporary directory."""
    local = os.environ.get("SPARK_LOCAL_DIRS", "").split(",")[0].strip()
    return local if local and os.path.isdir(local) else None


class _Clock:
    """Adds the time since the previous lap to a named phase."""

    def __init__(self, phases: dict[str, float]) -> None:
        self.phases = phases
        self.last = time.monotonic()

    def lap(self, phase: str) -> None:
        now = time.monotonic()
        self.phases[phase] = round(self.phases.get(phase, 0.0) + now - self.last, 4)
        self.last = now


# -- injected faults (tests) -------------------------------------------------------------------------------------


def _claim(marker: Path) -> bool:
    """Create ``marker`` if nobody has (atomic across processes); True if this call created it."""
    marker.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w") as fh:
        fh.write(str(os.getpid()))
    return True


def _fault(spec: TaskSpec, out: Outputs) -> None:
    """An injected fault, after the unit wrote its first chunk (tests of failure handling)."""
    name, _, arg = (spec.fault or "").partition(":")
    if name == "after_first_chunk":
        raise InjectedFaultError(f"task {spec.task_id}: injected fault after writing output")
    if name == "kill":
        out.flush()
        os.kill(os.getpid(), signal.SIGKILL)
    if name == "stop" or (name == "stop_once" and _claim(Path(arg) / "stopped")):
        if name == "stop":
            _claim(Path(arg) / f"stopped-{os.getpid()}")
        out.flush()  # the attempt leaves a file behind when it is killed
        os.kill(os.getpid(), signal.SIGSTOP)  # hangs for good: only a SIGKILL from outside ends it
        return
    if name in ("kill_once", "hold_once") and _claim(Path(arg) / ("killed" if name == "kill_once" else "held")):
        out.flush()  # the attempt leaves a file behind when it dies
        if name == "kill_once":
            os.kill(os.getpid(), signal.SIGKILL)
        deadline = time.monotonic() + 300
        while not (Path(arg) / "release").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
