"""When a plan that found nothing could next find something without the table changing: its time triggers.

The planner is pure, so the plan of an unchanged snapshot changes only with ``now``, and only where a
rule compares an age with a duration: the age of a mergeable run of DeltaFiles (``clustering.level*.
max_age_hours``), the time since a bucket's last compaction (``compaction.max_interval_hours`` and
``min_interval_hours``), DeltaFiles older than the table's ``acid.data.retain.hours`` (retention
pressure), and the expiry of pins that hold history back. A daemon that found nothing to do can therefore
skip planning an unchanged table until the earliest of those moments, and re-plan exactly then.

:func:`next_time_trigger` returns that moment. It is conservative. It takes every such threshold of every
file of every bucket that holds DeltaFiles (buckets without DeltaFiles have no time trigger), leaving out only
those that cannot fire (an age rule of a level with fewer than two files, the minimum interval of a bucket
without a BaseFile). So it may name a moment at which the plan is still empty (the daemon then plans once
more and asks again), never one later than the first at which the plan could become non-empty.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime

from maintd.planner.policy import Policy
from maintd.planner.stats import MS_PER_HOUR, to_ms
from maintd.table import Snapshot


def _candidates(snapshot: Snapshot, policy: Policy, now_ms: int) -> Iterable[int]:
    clustering, compaction = policy.clustering, policy.compaction
    # a level's age rule fires only for a run of at least two files of its source level
    ages = {0: clustering.level1.max_age_hours, 1: clustering.level2.max_age_hours} if clustering.enabled else {}
    retain = snapshot.retain_hours if compaction.enabled and compaction.retention_pressure else None
    with_deltas = False
    for files in snapshot.by_bucket().values():
        deltas = [f for f in files if f.kind == "delta"]
        if not deltas:
            continue
        with_deltas = True
        bases = [f for f in files if f.kind == "base"]
        clock = max(f.modification_time for f in bases) if bases else min(f.min_commit_time for f in deltas)
        if compaction.enabled:
            yield clock + int(compaction.max_interval_hours * MS_PER_HOUR)
            if bases:  # min_interval_hours only holds back a compaction of a bucket that has a BaseFile
                yield clock + int(compaction.min_interval_hours * MS_PER_HOUR)
        for level, hours in ages.items():
            same = [f for f in deltas if f.level == level]
            if len(same) >= 2:
                yield from (f.max_commit_time + int(hours * MS_PER_HOUR) for f in same)
        if retain is not None:
            yield from (f.max_commit_time + retain * MS_PER_HOUR for f in deltas)
    if with_deltas:
        yield from (p.expires for p in snapshot.live_pins(now_ms))


def next_time_trigger(snapshot: Snapshot, policy: Policy, now: datetime) -> datetime | None:
    """The earliest moment after ``now`` at which :func:`~maintd.planner.plan` of ``snapshot`` could differ
    from its plan at ``now`` through time alone; None when no rule of the policy depends on time here.

    Computed from the snapshot and the policy only (no I/O). A millisecond is added to every threshold, as
    some rules compare strictly.
    """
    now_ms = to_ms(now)
    later = [t for t in _candidates(snapshot, policy, now_ms) if t >= now_ms]
    if not later:
        return None
    return datetime.fromtimestamp((min(later) + 1) / 1000, tz=UTC)


__all__ = ["next_time_trigger"]
