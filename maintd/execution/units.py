"""From plan tasks to units: each plan task's input ``add`` actions, and a large compaction split into key ranges.

A plan task is the unit of commit (one bucket's rewrite lands whole or not at all); a *unit* is the
unit of execution (one Spark task's worth of work, or part of one). Clustering is always one unit: it
writes one DeltaFile. A compaction is split into key ranges (:func:`maintd.table.files.keys.split_key_ranges`)
when its inputs exceed ``task_input_bytes``, so no bucket is rewritten by a single thread, or when the
bucket keeps BaseFiles the compaction does not rewrite (*fences*). No output may span a kept file's
key range, so the ranges are cut at every fence.

Cut points come from the first keys of the bucket's BaseFiles (disjoint key ranges) and, for inputs
large enough to hold several row groups, from their footers: the key index of files maintd wrote
(the first key of every row group), else the leading key column's row-group minimums. That is one
small read per large file, in the driver, only for the compactions that are split by size. A range
reads only the row groups that can hold its keys, so a writer's small files (one row group, keys
spread over the whole bucket) are read by every range they overlap. A bucket made of nothing else
gains no parallelism from a split, and none is made where no cut point exists.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor

import pyarrow.parquet as pq

from maintd.errors import InvalidInputError
from maintd.execution.inputs import key_index
from maintd.execution.specs import (
    DEFAULT_TARGET_FILE_BYTES,
    ExecutionOptions,
    PlanDoc,
    PlanTaskDoc,
    TaskLookup,
    TaskPriors,
    TaskResult,
    TaskSpec,
)
from maintd.storage import Storage
from maintd.table.files.keys import Key, KeyRange, Point, key_value, split_key_ranges
from maintd.table.log.actions import AddFile
from maintd.table.log.snapshot import PartitionKey, Snapshot, partition_key

FOOTER_MIN_BYTES = 4 << 20
"""Inputs smaller than this (or than a quarter of a unit) are one row group or a few: their
``key_min``/``key_max`` say enough."""



def task_specs(plan: PlanDoc, snapshot: Snapshot, options: ExecutionOptions | None = None, *,
               storage: Storage | None = None, run_id: str = "") -> list[TaskSpec]:
    """The units of every plan task, in plan order (a task's units in key order).

    Args:
        plan: the plan (its read version must be ``snapshot``'s).
        snapshot: the table at the plan's read version.
        options: memory budget, read threads, split size and faults of the units.
        storage: the table's storage, to read the key index of large inputs (None: file stats only).
        run_id: makes the units' file-name tokens unique to this execution.

    Raises:
        InvalidInputError: the snapshot is not the plan's read version, an input is not live in it or lies
            outside its task's partition and bucket, or two tasks share an id (either would drop rows).
    """
    opts = options or ExecutionOptions()
    if snapshot.version != plan.read_version:
        raise InvalidInputError(
            f"table {plan.table_uri}: the plan was made at version {plan.read_version}, "
            f"not {snapshot.version}; load the snapshot at the plan's read version"
        )
    seen: set[str] = set()
    for t in plan.tasks:
        if t.task_id in seen:
            raise InvalidInputError(f"table {plan.table_uri}: the plan has two tasks with id {t.task_id!r}; "
                                    "give every task its own id (re-plan)")
        seen.add(t.task_id)
    groups = snapshot.by_bucket()
    return [u for t in plan.tasks for u in _units(plan.table_uri, t, snapshot, groups, opts, storage, run_id)]


def _inputs(uri: str, t: PlanTaskDoc, snapshot: Snapshot) -> tuple[AddFile, ...]:
    missing = [p for p in t.inputs if p not in snapshot.files]
    if missing:
        raise InvalidInputError(
            f"table {uri}: task {t.task_id} reads {missing[0]} (and {len(missing) - 1} more), which is not live "
            f"at version {snapshot.version}; re-plan"
        )
    if not t.inputs:
        raise InvalidInputError(f"table {uri}: task {t.task_id} has no input files")
    files = tuple(snapshot.files[p] for p in t.inputs)
    where = (partition_key(t.partition, snapshot.metadata.partition_by), t.bucket)
    stray = [f.path for f in files if (snapshot.partition_of(f), f.bucket) != where]
    if stray:
        raise InvalidInputError(
            f"table {uri}: task {t.task_id} is for partition {dict(t.partition)} bucket {t.bucket}, but reads "
            f"{stray[0]} (and {len(stray) - 1} more) of another partition or bucket; re-plan"
        )
    return files


def _units(uri: str, t: PlanTaskDoc, snapshot: Snapshot, groups: Mapping[tuple[PartitionKey, int], list[AddFile]],
           opts: ExecutionOptions, storage: Storage | None, run_id: str) -> list[TaskSpec]:
    inputs = _inputs(uri, t, snapshot)
    ranges: list[tuple[KeyRange, tuple[AddFile, ...]]] = [(KeyRange(), inputs)]
    if t.kind == "compact":
        bucket = groups.get((partition_key(t.partition, snapshot.metadata.partition_by), t.bucket), [])
        fences = kept_bases(bucket, t.inputs)
        big = sum(f.bytes for f in inputs) > opts.task_input_bytes
        if fences or big:
            keys = snapshot.metadata.primary_key
            points = footer_points(storage, inputs, keys, opts.read_threads,
                                   min(FOOTER_MIN_BYTES, opts.task_input_bytes // 4)) if big else {}
            splits = split_key_ranges(inputs, opts.task_input_bytes, fences=fences, points=points)
            ranges = [(s.range, s.files) for s in splits] or ranges
    level = None if t.kind == "compact" else (t.target_level if t.target_level is not None else 1)
    bases, deltas = [f for f in inputs if f.kind == "base"], [f for f in inputs if f.kind != "base"]
    prior_rows = t.kind == "compact" and snapshot.stores_prior_rows and bool(bases) and bool(deltas)
    task_priors = TaskPriors(bases=tuple(f.path for f in bases), below=max(f.max_version for f in bases),
                             delta=deltas[0].path) if prior_rows else None

    def priors_of(files: tuple[AddFile, ...]) -> TaskPriors | None:
        kinds = {f.kind == "base" for f in files}
        return task_priors if len(kinds) < 2 else None

    lookup = None
    if t.kind == "cluster" and snapshot.looks_up_prior_rows:
        key = (partition_key(t.partition, snapshot.metadata.partition_by), t.bucket)
        lookup = task_lookup([f for f in groups.get(key, []) if f.kind == "base"], inputs)

    return [TaskSpec(table_uri=uri, task_id=t.task_id, kind=t.kind, partition=dict(t.partition), bucket=t.bucket,
                     target_level=level, metadata=snapshot.metadata, inputs=files, unit=i, units=len(ranges),
                     key_lo=r.lo, key_hi=r.hi, target_file_bytes=t.target_file_bytes or DEFAULT_TARGET_FILE_BYTES,
                     token=unit_token(run_id, t.task_id, i), task_memory_bytes=opts.task_memory_bytes,
                     read_threads=opts.read_threads, decode_threads=opts.decode_threads,
                     fault=opts.fault_of(t.task_id, i), prior_rows=prior_rows,
                     task_priors=priors_of(files), lookup=lookup)
            for i, (r, files) in enumerate(ranges)]


def task_lookup(bases: Sequence[AddFile], inputs: Sequence[AddFile]) -> TaskLookup | None:
    """What a clustering of ``inputs`` looks up (``changes.prior.rows=lookup``): every live BaseFile of its
    bucket, or None when there is none, or when a DeltaFile it merges is not newer than all of them (its rows
    would then not all be changes since those BaseFiles were written). A compaction takes every DeltaFile of
    its bucket, so the DeltaFiles after it are newer than its BaseFiles; the check guards a log where that
    does not hold."""
    if not bases:
        return None
    below = max(f.max_version for f in bases)
    if any(f.min_version <= below for f in inputs):
        return None
    return TaskLookup(bases=tuple(bases), below=below)


def kept_bases(bucket: Sequence[AddFile], inputs: Sequence[str]) -> list[AddFile]:
    """The BaseFiles of a bucket that a compaction of ``inputs`` keeps (it rewrites some key ranges only)."""
    names = set(inputs)
    return [f for f in bucket if f.kind == "base" and f.path not in names]


def footer_points(storage: Storage | None, files: Sequence[AddFile], keys: Sequence[str], threads: int = 4,
                  min_bytes: int = FOOTER_MIN_BYTES) -> Mapping[str, Sequence[Point]]:
    """``(first key, bytes)`` of every row group of the ``files`` of at least ``min_bytes``: from the key index
    of files maintd wrote, else the leading key column's minimum (a key prefix, still a valid cut)."""
    large = [f for f in files if f.bytes >= min_bytes]
    if storage is None or not large:
        return {}

    def points(f: AddFile) -> list[Point]:
        with storage.filesystem.open_input_file(storage.full_path(f.path)) as fh:
            md = pq.read_metadata(fh)
        firsts = key_index(md) or _lead_minimums(md, keys[0])
        if not firsts:
            return []
        rows = max(1, md.num_rows)
        return [(k, f.bytes * md.row_group(i).num_rows // rows) for i, k in enumerate(firsts)]

    with ThreadPoolExecutor(max(1, min(threads, len(large)))) as pool:
        return {f.path: p for f, p in zip(large, pool.map(points, large), strict=True) if p}


def _lead_minimums(md: pq.FileMetaData, lead: str) -> list[Key]:
    """The leading key column's minimum of every row group, as key prefixes ([] when any is missing)."""
    if lead not in md.schema.names:
        return []
    col = md.schema.names.index(lead)
    out: list[Key] = []
    for i in range(md.num_row_groups):
        stats = md.row_group(i).column(col).statistics
        if stats is None or not stats.has_min_max:
            return []
        out.append((key_value(stats.min),))
    return out


def unit_token(run_id: str, task_id: str, unit: int) -> str:
    """16 hex digits naming a unit's files in every attempt of this execution."""
    return hashlib.sha256(f"{run_id}\n{task_id}\n{unit}".encode()).hexdigest()[:16]


def combine(task: PlanTaskDoc, units: Sequence[TaskResult], input_bytes: int | None = None) -> TaskResult:
    """The result of a plan task from its units' results: ok only if every unit is.

    ``input_bytes``: the task's input bytes (units of a split task share the DeltaFiles, so the sum of
    their ``bytes_read`` counts those more than once); default: that sum.
    """
    ordered = sorted(units, key=lambda r: r.unit)
    expected = ordered[0].units if ordered else 1
    ok = len(ordered) == expected and all(r.ok for r in ordered)
    errors = [r.error for r in ordered if not r.ok and r.error]
    if len(ordered) < expected and not errors:
        errors = [f"{expected - len(ordered)} of {expected} key range(s) reported no result"]
    modes = {r.mode for r in ordered}
    mode = next((m for m in ("spill", "stream", "memory") if m in modes), "none")
    phases: dict[str, float] = {}
    for r in ordered:
        for k, v in r.phases.items():
            phases[k] = round(phases.get(k, 0.0) + v, 4)
    return TaskResult(task_id=task.task_id, kind=task.kind, ok=ok, inputs=task.inputs,
                      adds=tuple(a for r in ordered for a in r.adds),
                      priors=tuple(p for r in ordered for p in r.priors), unit=0, units=expected,
                      bytes_read=input_bytes if input_bytes is not None else sum(r.bytes_read for r in ordered),
                      rows_read=sum(r.rows_read for r in ordered),
                      rows_written=sum(r.rows_written for r in ordered),
                      bytes_written=sum(r.bytes_written for r in ordered),
                      seconds=round(sum(r.seconds for r in ordered), 4), mode=mode,  # type: ignore[arg-type]
                      error="; ".join(errors) or None, phases=phases,
                      attempt=max((r.attempt for r in ordered), default=0))
