"""The size estimator: what a simulated merge writes, from its inputs.

A data file's size is a fixed *overhead* of its layout (the Parquet footer with its statistics and the magic
bytes, measured on the table's files) plus a *payload* that grows with what it holds. Outputs are straight
lines learned from the merges the log shows (least squares, when their sizes vary enough to pin a line down),
else anchored at the measured overhead:

* clustering keeps every row version: ``fixed + ratio x input payload`` bytes per target level (else
  ``overhead + input payload``).
* compaction keeps the latest row of each live key: ``b + U x (1 - overlap) - D`` rows from a bucket's base rows
  ``b``, upsert rows ``U`` and delete rows ``D``. The *key overlap*, the share of upserts that replace a live
  key, is learned from past compactions (per bucket, shrunk towards the table's) or measured on a sample of
  files (:mod:`maintd.simulate.keys`). Bytes are ``fixed + bytes per row x rows``, learned from the BaseFiles (or
  the level-0 bytes per upsert row).
* a compaction of a table with ``changes.prior.rows`` that rewrites a BaseFile also writes prior-rows files,
  whose bytes are a line of their *driver* (the DeltaFiles' payload plus BaseFile bytes per row x (upserts x
  overlap + deletes)) learned from the log, else ``merged overhead + driver``.

Everything here is pure: the caller measures the overheads and the sampled overlap.
docs/policies.md ("Where the numbers come from") describes the estimates.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from maintd.simulate.pattern import MergeObservation, WritePattern
from maintd.table.log.actions import AddFile, FileKind

BKey = tuple[tuple[tuple[str, str | None], ...], int]
LAYOUTS = ("L0", "merged", "base")
"""File layouts with their own overhead: level-0 DeltaFiles, merged (level-1/2) DeltaFiles, BaseFiles."""


def layout(f: AddFile) -> str:
    if f.kind == "base":
        return "base"
    return "L0" if f.level == 0 else "merged"


@dataclass(frozen=True)
class OutputEstimate:
    """One estimated output file of a merge."""

    kind: FileKind
    level: int | None
    rows: int
    delete_rows: int
    bytes: int


@dataclass(frozen=True)
class Line:
    """``fixed + slope x x``: the bytes of an output file from its size driver (input payload, or rows)."""

    fixed: float
    slope: float

    def __call__(self, x: float) -> int:
        return max(0, round(self.fixed + self.slope * x))


def fit_line(xs: Sequence[float], ys: Sequence[float]) -> Line | None:
    """Least squares through ``(x, y)``; None unless there are 3+ points, x varies by 20%+ and the line is sane."""
    if len(xs) < 3 or min(xs) <= 0 or max(xs) < 1.2 * min(xs):
        return None
    a = np.column_stack([np.ones(len(xs)), np.asarray(xs, dtype=float)])
    (fixed, slope), *_ = np.linalg.lstsq(a, np.asarray(ys, dtype=float), rcond=None)
    return Line(float(fixed), float(slope)) if fixed >= 0 and slope > 0 else None


def _anchored(fixed: float, xs: Sequence[float], ys: Sequence[float]) -> Line | None:
    """The line through ``(0, fixed)`` that fits the points' totals; None without points."""
    total = sum(xs)
    return Line(fixed, max(0.0, sum(ys) - fixed * len(ys)) / total) if total > 0 else None


@dataclass(frozen=True)
class SizeModel:
    """How big simulated merge outputs are (see the module docstring).

    ``sources`` says where each learned figure came from (``log``, ``files``, ``sample``, ``default``), so
    the report can tell a measured figure from an assumed one.
    """

    overhead: Mapping[str, int]
    upsert_row_bytes: float
    delete_row_bytes: float
    merge: Mapping[int, Line]
    base: Line
    key_overlap: float
    bucket_overlap: Mapping[BKey, float] = field(default_factory=dict)
    sources: Mapping[str, str] = field(default_factory=dict)
    prior: Line | None = None
    """Prior-rows bytes from their driver (:meth:`prior_driver`), learned from the log; None: not observed."""

    def payload(self, f: AddFile) -> float:
        return max(0.0, f.bytes - self.overhead.get(layout(f), 0))

    def cluster(self, inputs: Sequence[AddFile], level: int) -> OutputEstimate:
        """A clustering merge into ``level``: every row version kept."""
        line = self.merge.get(level) or Line(self.overhead.get("merged", 0), 1.0)
        return OutputEstimate("delta", level, sum(f.rows for f in inputs), sum(f.delete_rows for f in inputs),
                              line(sum(self.payload(f) for f in inputs)))

    def compact_rows(self, inputs: Sequence[AddFile]) -> int:
        """Live keys after compaction: base rows, plus new keys among upserts, minus deletes."""
        base = sum(f.rows for f in inputs if f.kind == "base")
        upserts, deletes = delta_rows(inputs)
        overlap = self.overlap_of(inputs[0].partition, inputs[0].bucket) if inputs else self.key_overlap
        return max(0, round(base + upserts * (1.0 - overlap) - deletes))

    def overlap_of(self, partition: Mapping[str, str | None], bucket: int) -> float:
        """The key overlap of one bucket: its own where its compactions were seen, else the table's."""
        return self.bucket_overlap.get(bucket_key(partition, bucket), self.key_overlap)

    def prior_driver(self, inputs: Sequence[AddFile], *, has_base: bool | None = None) -> float:
        """What a compaction's prior-rows files hold, in payload bytes: its DeltaFiles' payload, and BaseFile
        bytes per row for each changed key that was live (0 when it rewrites no BaseFile: it writes none). A
        clustering that looks up (``has_base``: its bucket has BaseFiles) stores the same."""
        deltas = [f for f in inputs if f.kind == "delta"]
        if has_base is None:
            has_base = any(f.kind == "base" for f in inputs)
        if not deltas or not has_base:
            return 0.0
        upserts, deletes = delta_rows(deltas)
        overlap = self.overlap_of(inputs[0].partition, inputs[0].bucket)
        return sum(self.payload(f) for f in deltas) + self.base.slope * (upserts * overlap + deletes)

    def prior_bytes(self, inputs: Sequence[AddFile], *, has_base: bool | None = None) -> int:
        """Bytes of the prior-rows files a compaction of ``inputs`` writes in a table with ``changes.prior.rows``
        (or a clustering that looks up, ``has_base``)."""
        x = self.prior_driver(inputs, has_base=has_base)
        if x <= 0:
            return 0
        return (self.prior or Line(self.overhead.get("merged", 0), 1.0))(x)

    def compact(self, inputs: Sequence[AddFile]) -> OutputEstimate | None:
        """A compaction into one BaseFile, or None when no live row survives (the real merge writes nothing)."""
        rows = self.compact_rows(inputs)
        if rows == 0:
            return None
        return OutputEstimate("base", None, rows, 0, self.base(rows))


def delta_rows(inputs: Iterable[AddFile]) -> tuple[int, int]:
    """(upsert rows, delete rows) of the DeltaFiles among ``inputs``."""
    deltas = [f for f in inputs if f.kind == "delta"]
    deletes = sum(f.delete_rows for f in deltas)
    return sum(f.rows for f in deltas) - deletes, deletes


def _row_bytes(pattern: WritePattern, overhead: int) -> tuple[float, float, str]:
    """Payload bytes per upsert row and per delete row of level-0 files, by least squares over the trace.

    Deletes carry only the key, so their rows are smaller; when the trace cannot tell the two apart (deletes
    always in the same proportion), both get the mean payload per row.
    """
    writes = [w for c in pattern.commits for w in c.writes if w.rows]
    ups = np.array([w.rows - w.delete_rows for w in writes], dtype=float)
    dels = np.array([w.delete_rows for w in writes], dtype=float)
    pay = np.array([max(0.0, w.bytes - w.files * overhead) for w in writes], dtype=float)
    rows = float(ups.sum() + dels.sum())
    mean = float(pay.sum() / rows) if rows else 0.0
    a = np.column_stack([ups, dels])
    if len(writes) >= 2 and dels.any() and ups.any() and np.linalg.cond(a) < 1e6:
        (b, c), *_ = np.linalg.lstsq(a, pay, rcond=None)
        if b > 0 and c >= 0:
            return float(b), float(c), "log"
    return mean, mean, "log"


def _merge_lines(overhead: Mapping[str, int], merges: Iterable[MergeObservation]) -> dict[int, Line]:
    """Output bytes from input payload of the observed clustering merges, per target level."""
    points: dict[int, tuple[list[float], list[float]]] = {}
    for m in merges:
        if m.kind != "cluster" or len(m.outputs) != 1 or not m.outputs[0].level:
            continue
        pin = sum(max(0.0, f.bytes - overhead.get(layout(f), 0)) for f in m.inputs)
        if pin > 0:
            xs, ys = points.setdefault(m.outputs[0].level or 0, ([], []))
            xs.append(pin)
            ys.append(float(m.outputs[0].bytes))
    lines = {lvl: fit_line(xs, ys) or _anchored(overhead.get("merged", 0), xs, ys) for lvl, (xs, ys) in points.items()}
    return {lvl: line for lvl, line in lines.items() if line is not None}


def bucket_key(partition: Mapping[str, str | None], bucket: int) -> tuple[tuple[tuple[str, str | None], ...], int]:
    """A (partition, bucket) key that does not depend on the order of the partition mapping."""
    return tuple(sorted(partition.items(), key=lambda kv: kv[0])), bucket


def _overlap_terms(m: MergeObservation) -> tuple[float, float]:
    """(upsert rows that replaced a live key, upsert rows) implied by one compaction: ``b + U - D - out`` and U."""
    base = sum(f.rows for f in m.inputs if f.kind == "base")
    upserts, deletes = delta_rows(m.inputs)
    out = sum(f.rows for f in m.outputs)
    return base + upserts - deletes - out, upserts


def overlap_from_merges(merges: Iterable[MergeObservation]) -> tuple[float | None, dict[BKey, float]]:
    """The key overlap the observed compactions imply: table-wide, and per (partition, bucket).

    A bucket's own figure is shrunk towards the table's by the evidence of one typical compaction (its mean
    upsert rows), so a bucket seen compacting once or twice is not taken at its word.
    """
    num: dict[BKey, float] = {}
    den: dict[BKey, float] = {}
    count = 0
    for m in merges:
        if m.kind != "compact":
            continue
        n, d = _overlap_terms(m)
        key = bucket_key(dict(m.partition), m.bucket)
        num[key], den[key] = num.get(key, 0.0) + n, den.get(key, 0.0) + d
        count += 1
    total = sum(den.values())
    if total <= 0:
        return None, {}
    table = _clamp(sum(num.values()) / total)
    prior = total / count
    return table, {k: _clamp((num[k] + prior * table) / (den[k] + prior)) for k in den}


def _clamp(x: float) -> float:
    return min(1.0, max(0.0, x))


def _base_line(overhead: Mapping[str, int], merges: Iterable[MergeObservation], files: Iterable[AddFile]
               ) -> tuple[Line | None, str]:
    """BaseFile bytes from rows, and where the line came from.

    From the compactions' outputs and the live BaseFiles when there are any. Otherwise from the merged
    DeltaFiles of the highest level seen (sorted by key and large, they compress like BaseFiles, much better
    than small level-0 files), anchored at the BaseFile overhead.
    """
    files = list(files)
    bases = {f.path: f for m in merges if m.kind == "compact" for f in m.outputs if f.kind == "base"}
    bases |= {f.path: f for f in files if f.kind == "base"}
    xs = [float(f.rows) for f in bases.values() if f.rows]
    ys = [float(f.bytes) for f in bases.values() if f.rows]
    line = fit_line(xs, ys) or _anchored(overhead.get("base", 0), xs, ys)
    if line is not None:
        return line, "log"
    merged = {f.path: f for m in merges for f in m.outputs if layout(f) == "merged"}
    merged |= {f.path: f for f in files if layout(f) == "merged"}
    top = max((f.level or 0 for f in merged.values()), default=0)
    chosen = [f for f in merged.values() if f.level == top and f.rows]
    rows = sum(f.rows for f in chosen)
    if not rows:
        return None, "default"
    payload = sum(max(0.0, f.bytes - overhead.get("merged", 0)) for f in chosen)
    return Line(overhead.get("base", 0), payload / rows), f"level-{top} files"


_NEAREST = {"L0": ("L0", "merged", "base"), "merged": ("merged", "base", "L0"), "base": ("base", "merged", "L0")}
"""For each layout, the layouts whose measured overhead stands in for its own when none of its files was read,
nearest first. Maintenance writes merged DeltaFiles and BaseFiles alike (a version column, the key index in
the footer), so each is the other's nearest; a writer's level-0 file has neither and keeps the statistics of
its key columns only, so its footer is the smallest, and the last stand-in."""


def learn_sizes(pattern: WritePattern, files: Iterable[AddFile], *, overheads: Mapping[str, int] | None = None,
                sampled_overlap: float | None = None) -> SizeModel:
    """Learn the size model from the pattern's trace and merges and the table's live ``files``.

    Args:
        pattern: the learned write pattern (its writes and the merges observed in its window).
        files: the live files of the state the simulation starts from (their BaseFiles give bytes per row).
        overheads: measured per-file overhead per layout (:func:`maintd.simulate.keys.measure_overheads`).
        sampled_overlap: the key overlap measured on the table's files, used when no compaction was observed.
    """
    files = list(files)
    sources: dict[str, str] = {}
    known = {k: v for k, v in (overheads or {}).items() if v > 0}
    overhead = {k: next((known[n] for n in _NEAREST[k] if n in known), 0) for k in LAYOUTS}
    sources["overhead"] = "files" if known else "default"
    ups, dels, sources["row_bytes"] = _row_bytes(pattern, overhead["L0"])
    merge = _merge_lines(overhead, pattern.merges)
    sources["merge"] = "log" if merge else "default"
    base, sources["base"] = _base_line(overhead, pattern.merges, files)
    overlap, per_bucket = overlap_from_merges(pattern.merges)
    if overlap is not None:
        sources["key_overlap"] = "log"
    elif sampled_overlap is not None:
        overlap, sources["key_overlap"] = sampled_overlap, "sample"
    else:
        overlap, sources["key_overlap"] = 0.0, "default"
    model = SizeModel(overhead=overhead, upsert_row_bytes=ups, delete_row_bytes=dels, merge=merge,
                      base=base or Line(overhead["base"], ups), key_overlap=overlap,
                      bucket_overlap=per_bucket, sources=sources)
    prior = _prior_line(model, pattern.merges)
    return replace(model, prior=prior, sources={**sources, "prior": "log" if prior is not None else "default"})


def _prior_line(model: SizeModel, merges: Iterable[MergeObservation]) -> Line | None:
    """Prior-rows bytes from their driver, over the maintenance commits of the log that wrote prior-rows files
    (compactions, and clusterings that looked up: a BaseFile was there, or none would have been written)."""
    points = [(model.prior_driver(m.inputs, has_base=True), float(m.prior_bytes)) for m in merges if m.prior_bytes]
    xs = [x for x, _ in points if x > 0]
    ys = [y for x, y in points if x > 0]
    return fit_line(xs, ys) or _anchored(model.overhead.get("merged", 0), xs, ys)


__all__ = ["LAYOUTS", "BKey", "Line", "OutputEstimate", "SizeModel", "bucket_key", "fit_line", "layout",
           "learn_sizes", "overlap_from_merges"]
