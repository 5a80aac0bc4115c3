"""Clustering rules: which contiguous run of level-0 (or level-1) DeltaFiles to merge, if any.

Invariant (docs/policies.md, "Contiguity"): a bucket's DeltaFiles ordered by (min_version,
max_version, path) have version ranges that do not interleave. A merge takes a slice of that order
whose two ends are *cut points* (every file before the slice ends below its first version, every file
after it starts above its last version), so the output's version range overlaps no other file and the
invariant holds after the merge. Isolated files and files of other levels end a run; so does the
commit-time span limit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from maintd.planner.candidates import Candidate, Skip
from maintd.planner.policy import ClusteringPolicy, LevelPolicy
from maintd.planner.stats import MS_PER_HOUR, BucketStats, hours
from maintd.table.log.actions import AddFile
from maintd.units import fmt_bytes, fmt_hours


@dataclass(frozen=True)
class Window:
    """A maximal mergeable slice ``[start, end)`` of the bucket's DeltaFiles for one source level."""

    start: int
    end: int
    files: tuple[AddFile, ...]

    @property
    def bytes(self) -> int:
        return sum(f.bytes for f in self.files)

    def oldest_ms(self) -> int:
        return min(f.max_commit_time for f in self.files)


def cut_points(deltas: Sequence[AddFile]) -> list[bool]:
    """``cuts[i]`` is True if a merge may start or end before ``deltas[i]`` (``cuts[len]`` is True)."""
    cuts = [True] * (len(deltas) + 1)
    high = -1
    for i, f in enumerate(deltas):
        cuts[i] = i == 0 or high < f.min_version
        high = max(high, f.max_version)
    return cuts


def _extend(deltas: Sequence[AddFile], ok: Sequence[bool], cuts: Sequence[bool], i: int, span_ms: int,
            max_files: int) -> int | None:
    """The last cut point reachable from ``i`` through eligible files within the span and file limits."""
    lo, hi, end = deltas[i].min_commit_time, deltas[i].max_commit_time, None
    j = i
    while j < len(deltas) and ok[j] and j - i < max_files:
        lo, hi = min(lo, deltas[j].min_commit_time), max(hi, deltas[j].max_commit_time)
        if hi - lo > span_ms:
            break
        j += 1
        if cuts[j]:
            end = j
    return end


def windows(deltas: Sequence[AddFile], level: int, policy: ClusteringPolicy, cuts: Sequence[bool]) -> list[Window]:
    """Maximal mergeable slices of ``level`` files, oldest first (single files included)."""
    ok = [f.level == level and f.bytes <= policy.isolation_bytes for f in deltas]
    span_ms = int(policy.max_time_span_hours * MS_PER_HOUR)
    out: list[Window] = []
    i = 0
    while i < len(deltas):
        end = _extend(deltas, ok, cuts, i, span_ms, policy.max_input_files) if ok[i] and cuts[i] else None
        if end is None:
            i += 1
            continue
        out.append(Window(i, end, tuple(deltas[i:end])))
        i = end
    return out


def _triggers(w: Window, lvl: LevelPolicy, name: str, now_ms: int) -> list[tuple[str, str]]:
    n, size, age = len(w.files), w.bytes, hours(now_ms - w.oldest_ms())
    fired = []
    if n >= lvl.min_files:
        fired.append((f"clustering.{name}.min_files", f"{n} files >= min_files {lvl.min_files}"))
    if size >= lvl.trigger_bytes:
        fired.append((f"clustering.{name}.trigger_bytes",
                      f"{fmt_bytes(size)} >= trigger_bytes {fmt_bytes(lvl.trigger_bytes)}"))
    if age >= lvl.max_age_hours:
        fired.append((f"clustering.{name}.max_age_hours",
                      f"oldest {fmt_hours(age)} >= max_age_hours {fmt_hours(lvl.max_age_hours)}"))
    return fired if n >= 2 else []


def _take(w: Window, lvl: LevelPolicy, cuts: Sequence[bool]) -> tuple[AddFile, ...]:
    """The oldest prefix of ``w`` holding about ``target_bytes``, ending at a cut point."""
    total, k = 0, 0
    while k < len(w.files) and total < lvl.target_bytes:
        total += w.files[k].bytes
        k += 1
    ends = [e for e in range(w.start + 2, w.end + 1) if cuts[e]]
    below = [e for e in ends if e <= w.start + k]
    end = below[-1] if below else ends[0]
    return w.files[: end - w.start]


def _why_not(ws: list[Window], lvl: LevelPolicy, name: str, src: int, now_ms: int) -> str:
    if not ws:
        return f"no mergeable level-{src} files"
    w = max(ws, key=lambda x: (len(x.files), x.bytes))
    age = hours(now_ms - w.oldest_ms())
    where = " in the largest mergeable run" if len(ws) > 1 else ""
    return (f"{len(w.files)} level-{src} files{where} < min_files {lvl.min_files}, "
            f"{fmt_bytes(w.bytes)} < trigger_bytes {fmt_bytes(lvl.trigger_bytes)} and oldest {fmt_hours(age)} "
            f"< max_age_hours {fmt_hours(lvl.max_age_hours)}")


def _level(stats: BucketStats, policy: ClusteringPolicy, src: int, cuts: Sequence[bool]) -> Candidate | str:
    name = f"level{src + 1}"
    lvl: LevelPolicy = getattr(policy, name)
    ws = windows(stats.deltas, src, policy, cuts)
    for w in ws:
        fired = _triggers(w, lvl, name, stats.now_ms)
        if fired:
            inputs = _take(w, lvl, cuts)
            size = sum(f.bytes for f in inputs)
            reason = (f"merge {len(inputs)} level-{src} files ({fmt_bytes(size)}) into level {src + 1}: "
                      + "; ".join(m for _, m in fired))
            return Candidate("cluster", src + 1, inputs, fired[0][0], reason, size)
    return _why_not(ws, lvl, name, src, stats.now_ms)


def clustering_candidate(stats: BucketStats, policy: ClusteringPolicy) -> Candidate | Skip:
    """The clustering task for a bucket (level 0 -> 1 before 1 -> 2), or why there is none."""
    if not policy.enabled:
        return Skip("clustering.enabled", "clustering disabled")
    if not stats.deltas:
        return Skip("no_delta_files", "no DeltaFiles to cluster")
    cuts = cut_points(stats.deltas)
    reasons = []
    for src in (0, 1):
        found = _level(stats, policy, src, cuts)
        if isinstance(found, Candidate):
            return found
        reasons.append(found)
    isolated = sum(1 for f in stats.deltas if f.bytes > policy.isolation_bytes)
    if isolated:
        reasons.append(f"{isolated} isolated files > isolation_bytes {fmt_bytes(policy.isolation_bytes)}")
    return Skip("clustering.below_thresholds", "no clustering, " + "; ".join(reasons))
