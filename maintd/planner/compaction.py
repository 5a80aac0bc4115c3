"""Compaction rules: when a bucket's DeltaFiles are folded into its BaseFiles, and which BaseFiles are rewritten.

A bucket's BaseFiles hold disjoint key ranges (docs/format.md, "BaseFiles"); compaction writes BaseFiles
of about ``target_file_bytes`` each, cut between keys. It always takes *every* DeltaFile of the bucket,
but only the BaseFiles it must: those whose key range a DeltaFile's key range overlaps, plus the small
BaseFiles (below half the target) next to them, which it merges instead of leaving small files behind.
When the BaseFiles so kept add up to less than one target file, rewriting them too costs little and
leaves the bucket fewer, fuller files, so the whole bucket is rewritten.
"""

from __future__ import annotations

from collections.abc import Sequence

from maintd.planner.candidates import Candidate, Skip
from maintd.planner.policy import CompactionPolicy
from maintd.planner.stats import BucketStats, hours
from maintd.table.files.keys import overlaps, sort_key
from maintd.table.log.actions import AddFile
from maintd.units import fmt_bytes, fmt_hours


def rewrite_split(s: BucketStats, p: CompactionPolicy) -> tuple[tuple[AddFile, ...], tuple[AddFile, ...]]:
    """(BaseFiles a compaction rewrites, BaseFiles it keeps), both in key order."""
    bases = sorted(s.bases, key=lambda f: (f.key_min is not None, sort_key(f.key_min or ()), f.path))
    if len(bases) <= 1:
        return tuple(bases), ()
    take = [any(overlaps(b.key_min, b.key_max, d.key_min, d.key_max) for d in s.deltas) for b in bases]
    small = [b.bytes * 2 < p.target_file_bytes for b in bases]
    for order in (range(1, len(bases)), range(len(bases) - 2, -1, -1)):  # small neighbours join, both ways
        for i in order:
            near = take[i - 1] if order.step == 1 else take[i + 1]
            take[i] = take[i] or (small[i] and near)
    kept = [b for b, t in zip(bases, take, strict=True) if not t]
    if sum(b.bytes for b in kept) < p.target_file_bytes:
        return tuple(bases), ()
    return tuple(b for b, t in zip(bases, take, strict=True) if t), tuple(kept)


def _base_ratio(s: BucketStats, rewritten: Sequence[AddFile], kept: Sequence[AddFile]) -> tuple[float | None, str]:
    """Delta bytes over the bytes of the BaseFiles compaction would rewrite (None: it rewrites none)."""
    d, b = s.delta_bytes, sum(f.bytes for f in rewritten)
    if not b:
        return None, "DeltaFiles touch no BaseFile's key range"
    what = "delta/base bytes" if not kept else f"delta bytes / bytes of the {len(rewritten)} BaseFile(s) they touch"
    return d / b, f"{what} {d / b:.2f}"


def _fired(s: BucketStats, p: CompactionPolicy, rewritten: Sequence[AddFile], kept: Sequence[AddFile]
           ) -> tuple[list[tuple[str, str]], list[str]]:
    """(triggers that fired, sentences for those that did not), in a fixed order."""
    fired: list[tuple[str, str]] = []
    quiet: list[str] = []

    def check(ok: bool, rule: str, yes: str, no: str) -> None:
        if ok:
            fired.append((f"compaction.{rule}", yes))
        else:
            quiet.append(no)

    expired = s.expired_deltas
    if p.retention_pressure:
        # Pins hold history back: what a compaction removes now stays on storage until they expire.
        pinned = s.pinned_until_ms is not None and bool(expired)
        old = f"{len(expired)} DeltaFiles older than acid.data.retain.hours {s.retain_hours} h"
        held = (f"{old}, but pins hold the table's history for "
                 f"{fmt_hours(hours((s.pinned_until_ms or 0) - s.now_ms))} more: compacting them frees nothing before"
                 if pinned else f"no DeltaFile older than acid.data.retain.hours {s.retain_hours} h")
        check(bool(expired) and not pinned, "retention_pressure", old, held)
    n = len(s.deltas)
    check(n >= p.max_delta_files, "max_delta_files", f"{n} DeltaFiles >= max_delta_files {p.max_delta_files}",
          f"{n} DeltaFiles < max_delta_files {p.max_delta_files}")
    if s.bases:  # the ratio needs a base: the BaseFiles compaction would rewrite
        ratio, text = _base_ratio(s, rewritten, kept)
        check(ratio is not None and ratio >= p.delta_base_ratio and s.delta_bytes > 0, "delta_base_ratio",
              f"{text} >= delta_base_ratio {p.delta_base_ratio}",
              f"{text} < delta_base_ratio {p.delta_base_ratio}" if ratio is not None else text)
    dr, rows = s.delete_rows, s.delta_rows
    share = f"{dr / rows:.2f}" if rows else "0"
    check(dr > 0 and dr >= p.update_delete_share * rows, "update_delete_share",
          f"delete share {share} >= update_delete_share {p.update_delete_share}",
          f"delete share {share} < update_delete_share {p.update_delete_share}")
    since = hours(s.since_compaction_ms or 0)
    # the clock: the last compaction (newest BaseFile) or, for a bucket never compacted, its oldest DeltaFile
    clock = (f"{fmt_hours(since)} since last compaction" if s.bases
             else f"never compacted, oldest DeltaFile {fmt_hours(since)} old")
    limit = f"max_interval_hours {fmt_hours(p.max_interval_hours)}"
    check(since >= p.max_interval_hours, "max_interval_hours", f"{clock} >= {limit}", f"{clock} < {limit}")
    return fired, quiet


def _stale_bytes(s: BucketStats, rewritten: Sequence[AddFile]) -> int:
    """Estimated bytes compaction drops: each delete row and the row it deletes (update rows are not tracked)."""
    rows = s.delta_rows
    if not rows:
        return 0
    per_row = s.delta_bytes / rows
    return min(sum(f.bytes for f in rewritten) + s.delta_bytes, int(2 * s.delete_rows * per_row))


def compaction_candidate(s: BucketStats, p: CompactionPolicy) -> Candidate | Skip:
    """The compaction task of a bucket, or why there is none."""
    if not p.enabled:
        return Skip("compaction.enabled", "compaction disabled")
    if not s.deltas:
        return Skip("no_delta_files", "no compaction, no DeltaFiles on top of the BaseFile")
    since = hours(s.since_compaction_ms or 0)
    rewritten, kept = rewrite_split(s, p)
    fired, quiet = _fired(s, p, rewritten, kept)
    if fired and s.bases and since < p.min_interval_hours:
        return Skip("compaction.min_interval_hours",
                    f"no compaction, {fired[0][1]} but last compaction {fmt_hours(since)} ago < min_interval_hours "
                    f"{fmt_hours(p.min_interval_hours)}")
    if not fired:
        return Skip("compaction.below_thresholds", "no compaction, " + ", ".join(quiet))
    inputs = (*rewritten, *s.deltas)
    total = sum(f.bytes for f in inputs)
    stale = _stale_bytes(s, rewritten)
    which = (f"{len(rewritten)} of {len(s.bases)} BaseFiles (keeping {len(kept)}, "
             f"{fmt_bytes(sum(f.bytes for f in kept))}, whose key ranges no DeltaFile touches)" if kept
             else f"{len(s.bases)} BaseFile(s)")
    reason = (f"compact {which} and {len(s.deltas)} DeltaFiles ({fmt_bytes(total)}) into BaseFiles of up to "
              f"{fmt_bytes(p.target_file_bytes)}: " + "; ".join(m for _, m in fired))
    return Candidate("compact", None, inputs, fired[0][0], reason, total - stale, stale)
