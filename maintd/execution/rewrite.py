"""The per-task rewrite that runs inside a Spark task (or a local thread): pyarrow only, no Spark.

A task reads its input files, merges them and writes one output file:

* ``cluster``: every row version kept, sorted by (primary key, version), into a DeltaFile at the
  target level carrying ``_maintd_op`` and ``_maintd_version``;
* ``compact``: the greatest version per key, deletes dropped, into a BaseFile.

Several tasks may share one Spark task (a *pack*, :func:`run_pack_json`): each task of a pack is
still rewritten, reported and, on failure, cleaned up on its own.

Memory. Inputs are sorted by primary key, so a merge never needs a whole bucket in memory. When the
estimated in-memory size of the inputs fits the task's budget (the common small-file case) every file
is fetched whole with one read, decoded in parallel threads and the files are merged in one step,
which is the fastest path. Otherwise the task streams: each file is read in bounded record batches
and the files are merged one key range at a time (a k-way merge whose ranges end before the smallest
"last buffered key" of any file), so memory stays near ``files x batch`` whatever the bucket size.
Every version of one key falls into the same range, so the latest-row rule is exact per range.

Merging. Inputs are taken in version order. When their version ranges do not overlap (always so for
level-0 files, one commit each), concatenating them in that order already puts the versions of one
key in ascending order, so a stable sort on the primary key alone gives (key, version) order; only
inputs whose version ranges overlap need the version as a second sort key. Compaction then keeps the
last row of each key, unless it is a delete.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from itertools import pairwise
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from maintd.execution.specs import TaskResult, TaskSpec
from maintd.storage import LocalStorage, Storage, storage_for_uri
from maintd.table.actions import AddFile, Metadata
from maintd.table.files import WRITE_OPTIONS, data_file_path, file_schema, key_bounds, with_hidden_columns
from maintd.table.schema import OP_COLUMN, OP_DELETE, VERSION_COLUMN

EXPANSION = 6
"""Estimated in-memory bytes (Arrow, plus sort copies) per byte of compressed Parquet input."""
CHUNK_ROWS = 1 << 20
"""Rows gathered before a streamed key range is merged and written."""
OUTPUT_OPTIONS: dict[str, Any] = {**WRITE_OPTIONS, "dictionary_pagesize_limit": 64 << 10}
"""Parquet options of merge outputs: the format's (zstd 1, statistics), and a 64 KiB dictionary page
limit, so a high-cardinality column falls back to plain encoding early instead of hashing 1 MiB of
values first (faster, and smaller files after zstd)."""


class InjectedFaultError(RuntimeError):
    """Raised by a task that was told to fail (tests of failure handling)."""


def run_task_json(spec_json: str) -> str:
    """Entry point of a Spark task: spec JSON in, result JSON out; never raises."""
    return _run_json(spec_json).model_dump_json()


def run_pack_json(specs_json: Sequence[str], threads: int = 1) -> list[str]:
    """Entry point of a Spark task running a pack of tasks: one result JSON per spec; never raises."""
    return [r.model_dump_json() for r in run_pack(list(specs_json), threads)]


def run_pack(specs: Sequence[TaskSpec | str], threads: int = 1) -> list[TaskResult]:
    """Run several tasks in one process, ``threads`` at a time, in the order given; never raises.

    A task failing (or even its spec failing to parse) is reported in its own result; the other
    tasks of the pack are unaffected.
    """
    if threads <= 1 or len(specs) <= 1:
        return [_run_json(s) if isinstance(s, str) else run_task(s) for s in specs]
    with ThreadPoolExecutor(min(threads, len(specs))) as pool:
        return list(pool.map(lambda s: _run_json(s) if isinstance(s, str) else run_task(s), specs))


def _run_json(spec_json: str) -> TaskResult:
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
    return run_task(spec)


def run_task(spec: TaskSpec) -> TaskResult:
    """Rewrite one task's inputs. A failure is reported in the result, and the partial output deleted."""
    started = time.monotonic()
    out: _Output | None = None
    phases: dict[str, float] = {}
    try:
        storage = storage_for_uri(spec.table_uri)
        out = _Output(storage, spec)
        add, mode, rows_read = _rewrite(storage, spec, out, phases)
    except Exception as exc:  # reported, not raised: one failing bucket must not fail the others
        if out is not None:
            out.discard()
        return TaskResult(task_id=spec.task_id, kind=spec.kind, ok=False, inputs=_paths(spec),
                          seconds=time.monotonic() - started,
                          error=f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=5)}")
    return TaskResult(task_id=spec.task_id, kind=spec.kind, ok=True, inputs=_paths(spec), add=add,
                      bytes_read=sum(f.bytes for f in spec.inputs), rows_read=rows_read,
                      rows_written=add.rows if add else 0, bytes_written=add.bytes if add else 0,
                      seconds=time.monotonic() - started, mode=mode, phases=phases)


def _paths(spec: TaskSpec) -> tuple[str, ...]:
    return tuple(f.path for f in spec.inputs)


def fits_in_memory(spec: TaskSpec) -> bool:
    return sum(f.bytes for f in spec.inputs) * EXPANSION <= spec.task_memory_bytes


def in_version_order(inputs: Sequence[AddFile]) -> tuple[list[AddFile], bool]:
    """The inputs by ascending version, and whether their version ranges are disjoint (no overlap)."""
    files = sorted(inputs, key=lambda f: (f.min_version, f.max_version, f.path))
    disjoint = all(a.max_version < b.min_version for a, b in pairwise(files))
    return files, disjoint


def _rewrite(storage: Storage, spec: TaskSpec, out: _Output, phases: dict[str, float]
             ) -> tuple[AddFile | None, str, int]:
    keys = list(spec.metadata.primary_key)
    files, disjoint = in_version_order(spec.inputs)
    clock = _Clock(phases)
    if fits_in_memory(spec):
        chunks: Iterator[pa.Table] = iter([_read_all(storage, spec, files)])
        mode = "memory"
    else:
        chunks = _key_range_chunks(storage, spec, files)
        mode = "stream"
    clock.lap("read")
    rows_read = 0
    for chunk in chunks:
        clock.lap("read")
        rows_read += chunk.num_rows
        merged = merge_chunk(chunk, keys, spec.kind, version_ordered=disjoint)
        clock.lap("merge")
        out.write(merged)
        clock.lap("write")
        if spec.fault == "after_first_chunk":
            raise InjectedFaultError(f"task {spec.task_id}: injected fault after writing {out.path}")
    clock.lap("read")
    add = out.close()
    clock.lap("write")
    return add, mode, rows_read


class _Clock:
    """Adds the time since the previous lap to a named phase."""

    def __init__(self, phases: dict[str, float]) -> None:
        self.phases = phases
        self.last = time.monotonic()

    def lap(self, phase: str) -> None:
        now = time.monotonic()
        self.phases[phase] = round(self.phases.get(phase, 0.0) + now - self.last, 4)
        self.last = now


# -- merging -----------------------------------------------------------------------------------------------------


def merge_chunk(t: pa.Table, keys: Sequence[str], kind: str, *, version_ordered: bool) -> pa.Table:
    """Sort ``t`` by (key, version); for ``compact`` keep the greatest version per key, deletes dropped.

    ``version_ordered``: the rows of any one key already appear in ascending version order (inputs
    concatenated in version order, with disjoint version ranges), so a stable sort on the key suffices.
    """
    if t.num_rows == 0:
        return t
    if version_ordered and len(keys) == 1:
        idx = pc.sort_indices(t.column(keys[0]))
    else:
        order = [(k, "ascending") for k in keys] + ([] if version_ordered else [(VERSION_COLUMN, "ascending")])
        idx = pc.sort_indices(t, sort_keys=order)
    if kind == "compact":
        keep = _last_of_each_key([pc.take(t.column(k), idx) for k in keys])
        keep &= pc.not_equal(pc.take(t.column(OP_COLUMN), idx), OP_DELETE).to_numpy(zero_copy_only=False)
        idx = idx.filter(pa.array(keep))
    return t.take(idx)


def _last_of_each_key(sorted_keys: Sequence[pa.ChunkedArray | pa.Array]) -> np.ndarray:
    """Boolean mask of the rows that end a run of equal keys (columns already sorted)."""
    n = len(sorted_keys[0])
    mask = np.zeros(n, dtype=bool)
    if n == 0:
        return mask
    mask[n - 1] = True
    for col in sorted_keys:
        c = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
        mask[: n - 1] |= pc.not_equal(c.slice(0, n - 1), c.slice(1)).to_numpy(zero_copy_only=False)
    return mask


# -- reading -----------------------------------------------------------------------------------------------------


class _Layout:
    """Per task: which columns to read from a file of a given kind and level, and the merged schema."""

    def __init__(self, metadata: Metadata) -> None:
        self.metadata = metadata
        wanted = set(metadata.column_names) | {OP_COLUMN, VERSION_COLUMN}
        self._wanted = wanted
        self._columns: dict[tuple[str, int | None], list[str]] = {}
        keys = set(metadata.primary_key) | set(metadata.partition_by)
        names = [*metadata.column_names, OP_COLUMN, VERSION_COLUMN]
        base = file_schema(metadata, "delta", 1)
        self.schema = pa.schema([base.field(n) if n in keys or n in (OP_COLUMN, VERSION_COLUMN)
                                 else base.field(n).with_nullable(True) for n in names])

    def columns(self, f: AddFile) -> list[str]:
        key = (f.kind, f.level)
        if key not in self._columns:
            self._columns[key] = [c for c in file_schema(self.metadata, f.kind, f.level).names if c in self._wanted]
        return self._columns[key]

    def unify(self, t: pa.Table) -> pa.Table:
        """Columns in one order, value columns nullable: so delete-bearing and base files concat."""
        if t.schema.equals(self.schema):
            return t
        return t.select(self.schema.names).cast(self.schema)


def _fetch(storage: Storage) -> Callable[[str], bytes]:
    """Read a whole data file by its table-relative path (plain ``open`` on local storage: no pathlib)."""
    if isinstance(storage, LocalStorage):
        root = str(storage.root)

        def read_local(path: str) -> bytes:
            with open(os.path.join(root, path), "rb") as fh:
                return fh.read()

        return read_local
    return storage.read


def _decode(data: bytes, columns: list[str] | None) -> pa.Table:
    return pq.ParquetFile(pa.py_buffer(data), pre_buffer=False).read(columns=columns, use_threads=False)


def _read_all(storage: Storage, spec: TaskSpec, files: Sequence[AddFile]) -> pa.Table:
    """Read every input, in the order given, each fetched with one read and decoded from memory.

    Files are decoded in parallel threads (Parquet decoding releases the GIL). When every input is a
    level-0 file with the same columns (the small-file case), the parts are concatenated as read and
    the version column, one constant per file, is added once for all of them.
    """
    layout = _Layout(spec.metadata)
    fetch = _fetch(storage)
    level0 = all(f.kind == "delta" and f.level == 0 for f in files)

    def read(f: AddFile) -> pa.Table:
        t = _decode(fetch(f.path), None if level0 else layout.columns(f))
        return t if level0 else layout.unify(with_hidden_columns(t, f))

    if spec.read_threads > 1 and len(files) > 1:
        with ThreadPoolExecutor(min(spec.read_threads, len(files))) as pool:
            parts = list(pool.map(read, files))
    else:
        parts = [read(f) for f in files]
    if not level0:
        return pa.concat_tables(parts)
    l0 = file_schema(spec.metadata, "delta", 0)
    if all(p.schema.equals(l0) for p in parts):
        versions = np.repeat(np.array([f.min_version for f in files], dtype=np.int64), [p.num_rows for p in parts])
        data = pa.concat_tables(parts).append_column(pa.field(VERSION_COLUMN, pa.int64(), nullable=False),
                                                     pa.array(versions))
        return layout.unify(data)
    return pa.concat_tables([layout.unify(with_hidden_columns(p, f)) for p, f in zip(parts, files, strict=True)])


# -- streaming: a k-way merge by key ranges ---------------------------------------------------------------------


def _batches(storage: Storage, layout: _Layout, f: AddFile, batch_rows: int) -> Iterator[pa.Table]:
    pf = pq.ParquetFile(storage.filesystem.open_input_file(storage.full_path(f.path)))
    for b in pf.iter_batches(batch_size=batch_rows, columns=layout.columns(f), use_threads=False):
        yield layout.unify(with_hidden_columns(pa.Table.from_batches([b]), f))


class _Source:
    """One input file read batch by batch; ``buf`` holds its rows not yet emitted (sorted by key)."""

    def __init__(self, it: Iterator[pa.Table]) -> None:
        self.it = it
        self.buf: pa.Table | None = None
        self.done = False

    def refill(self) -> None:
        """Append the next batch to the buffer (mark the source done at its end)."""
        nxt = next(self.it, None)
        if nxt is None:
            self.done = True
        elif nxt.num_rows:
            self.buf = nxt if self.buf is None or self.buf.num_rows == 0 else pa.concat_tables([self.buf, nxt])

    def ensure(self) -> None:
        while not self.done and (self.buf is None or self.buf.num_rows == 0):
            self.refill()

    def take_below(self, lead: str, bound: pa.Scalar | None) -> pa.Table | None:
        """Remove and return the buffered rows whose leading key is < bound (all if bound is None)."""
        if self.buf is None or self.buf.num_rows == 0:
            return None
        n = self.buf.num_rows if bound is None else int(pc.sum(pc.less(self.buf.column(lead), bound)).as_py() or 0)
        if n == 0:
            return None
        head, self.buf = self.buf.slice(0, n), self.buf.slice(n)
        return head


def _key_range_chunks(storage: Storage, spec: TaskSpec, files: Sequence[AddFile]) -> Iterator[pa.Table]:
    """Yield the inputs' rows in ascending, disjoint ranges of the leading key column, each bounded in size.

    Within a range, the rows of each file come in the order of ``files``, so a stable sort on the key
    keeps the files' order between versions of one key.
    """
    md = spec.metadata
    layout = _Layout(md)
    lead = md.primary_key[0]
    row_bytes = max(1, sum(f.bytes for f in files) * EXPANSION // max(1, sum(f.rows for f in files)))
    budget_rows = max(4096, spec.task_memory_bytes // row_bytes)
    batch_rows = max(1024, budget_rows // (2 * len(files)))
    chunk_rows = max(batch_rows, min(CHUNK_ROWS, budget_rows // 2))
    sources = [_Source(_batches(storage, layout, f, batch_rows)) for f in files]
    pending: list[pa.Table] = []
    pending_rows = 0
    while True:
        for s in sources:
            s.ensure()
        live = [s for s in sources if s.buf is not None and s.buf.num_rows]
        if not live:
            break
        open_ = [s for s in live if not s.done]
        bound = min((s.buf.column(lead)[-1] for s in open_), key=lambda x: x.as_py()) if open_ else None  # type: ignore[union-attr]
        taken = [t for t in (s.take_below(lead, bound) for s in live) if t is not None]
        if not taken:  # every open buffer ends at the bound: read further in those files
            for s in open_:
                if s.buf is not None and s.buf.column(lead)[-1] == bound:
                    s.refill()
            continue
        pending += taken
        pending_rows += sum(t.num_rows for t in taken)
        if pending_rows >= chunk_rows:
            yield pa.concat_tables(pending)
            pending, pending_rows = [], 0
    if pending:
        yield pa.concat_tables(pending)


# -- output -----------------------------------------------------------------------------------------------------


class _Output:
    """The one output file of a task, written chunk by chunk (chunks arrive in key order)."""

    def __init__(self, storage: Storage, spec: TaskSpec) -> None:
        self.storage = storage
        self.spec = spec
        self.kind = "base" if spec.kind == "compact" else "delta"
        self.level = None if self.kind == "base" else spec.target_level
        self.path = data_file_path(spec.metadata, spec.partition, spec.bucket, self.kind, self.level)  # type: ignore[arg-type]
        self.schema = file_schema(spec.metadata, self.kind, self.level)  # type: ignore[arg-type]
        self._writer: pq.ParquetWriter | None = None
        self.rows = 0
        self.deletes = 0
        self.first: pa.Table | None = None
        self.last: pa.Table | None = None

    def write(self, t: pa.Table) -> None:
        if t.num_rows == 0:
            return
        t = t.select(self.schema.names)
        if not t.schema.equals(self.schema):
            t = t.cast(self.schema)
        if self._writer is None:
            self.storage.makedirs(self.path.rsplit("/", 1)[0])
            self._writer = pq.ParquetWriter(self.storage.full_path(self.path), self.schema,
                                            filesystem=self.storage.filesystem, **OUTPUT_OPTIONS)
            self.first = t.slice(0, 1)
        self._writer.write_table(t, row_group_size=CHUNK_ROWS)
        self.rows += t.num_rows
        if self.kind == "delta":
            self.deletes += int(pc.sum(pc.equal(t.column(OP_COLUMN), OP_DELETE)).as_py() or 0)
        self.last = t.slice(t.num_rows - 1, 1)

    def close(self) -> AddFile | None:
        """Finish the file and describe it; None when no row survived (the inputs are removed all the same)."""
        if self._writer is None:
            return None
        self._writer.close()
        self._writer = None
        size = self.storage.filesystem.get_file_info(self.storage.full_path(self.path)).size or 0
        assert self.first is not None and self.last is not None
        pk = self.spec.metadata.primary_key
        kmin, _ = key_bounds(self.first, pk)
        _, kmax = key_bounds(self.last, pk)
        ins: Sequence[AddFile] = self.spec.inputs
        return AddFile(path=self.path, partition=dict(self.spec.partition), bucket=self.spec.bucket,
                       kind=self.kind, level=self.level, rows=self.rows, bytes=size,  # type: ignore[arg-type]
                       min_version=min(f.min_version for f in ins), max_version=max(f.max_version for f in ins),
                       min_commit_time=min(f.min_commit_time for f in ins),
                       max_commit_time=max(f.max_commit_time for f in ins), delete_rows=self.deletes,
                       key_min=kmin, key_max=kmax, data_change=False)

    def discard(self) -> None:
        if self._writer is not None:
            with contextlib.suppress(Exception):
                self._writer.close()
            self._writer = None
        self.storage.delete(self.path)
