"""Compaction rules: when a bucket's BaseFile and all its DeltaFiles are rewritten into one BaseFile."""

from __future__ import annotations

from maintd.planner.candidates import Candidate, Skip, fmt_bytes, fmt_hours
from maintd.planner.policy import CompactionPolicy
from maintd.planner.stats import BucketStats, hours


def _fired(s: BucketStats, p: CompactionPolicy) -> tuple[list[tuple[str, str]], list[str]]:
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
        check(bool(expired), "retention_pressure",
              f"{len(expired)} DeltaFiles older than acid.data.retain.hours {s.retain_hours} h",
              f"no DeltaFile older than acid.data.retain.hours {s.retain_hours} h")
    n = len(s.deltas)
    check(n >= p.max_delta_files, "max_delta_files", f"{n} DeltaFiles >= max_delta_files {p.max_delta_files}",
          f"{n} DeltaFiles < max_delta_files {p.max_delta_files}")
    if s.bases:  # the ratio needs a base; multiplying avoids dividing by an empty base
        d, b = s.delta_bytes, s.base_bytes
        ratio = f"{d / b:.2f}" if b else "inf"
        check(d >= p.delta_base_ratio * b and d > 0, "delta_base_ratio",
              f"delta/base bytes {ratio} >= delta_base_ratio {p.delta_base_ratio}",
              f"delta/base bytes {ratio} < delta_base_ratio {p.delta_base_ratio}")
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


def _stale_bytes(s: BucketStats) -> int:
    """Estimated bytes compaction drops: each delete row and the row it deletes (update rows are not tracked)."""
    rows = s.delta_rows
    if not rows:
        return 0
    per_row = s.delta_bytes / rows
    return min(s.base_bytes + s.delta_bytes, int(2 * s.delete_rows * per_row))


def compaction_candidate(s: BucketStats, p: CompactionPolicy) -> Candidate | Skip:
    """The compaction task of a bucket, or why there is none."""
    if not p.enabled:
        return Skip("compaction.enabled", "compaction disabled")
    if not s.deltas:
        return Skip("no_delta_files", "no compaction, no DeltaFiles on top of the BaseFile")
    since = hours(s.since_compaction_ms or 0)
    fired, quiet = _fired(s, p)
    if fired and s.bases and since < p.min_interval_hours:
        return Skip("compaction.min_interval_hours",
                    f"no compaction, {fired[0][1]} but last compaction {fmt_hours(since)} ago < min_interval_hours "
                    f"{fmt_hours(p.min_interval_hours)}")
    if not fired:
        return Skip("compaction.below_thresholds", "no compaction, " + ", ".join(quiet))
    inputs = (*s.bases, *s.deltas)
    total = sum(f.bytes for f in inputs)
    stale = _stale_bytes(s)
    reason = (f"compact {len(s.bases)} BaseFile(s) and {len(s.deltas)} DeltaFiles ({fmt_bytes(total)}) into one "
              "BaseFile: " + "; ".join(m for _, m in fired))
    return Candidate("compact", None, inputs, fired[0][0], reason, total - stale, stale)
