"""What-if simulation of a table: learn its write pattern once, then replay it under each candidate policy.

:func:`learn` reads the table (its log, and a few footers and key columns of its files); :func:`simulate_table`
runs :func:`maintd.simulate.engine.simulate` once per policy from the same starting state and trace, so the
policies differ in nothing but themselves, and gathers the predictions into a
:class:`~maintd.simulate.report.SimulationReport`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from maintd.errors import InvalidInputError
from maintd.planner import Policy
from maintd.simulate.engine import simulate
from maintd.simulate.keys import SAMPLE_BYTES, measure_overheads, sample_key_overlap
from maintd.simulate.pattern import HOUR_MS, WritePattern, learn_pattern
from maintd.simulate.report import (
    DAY_MS,
    BucketRatesModel,
    PatternSummary,
    ScheduleSummary,
    SimulationReport,
    policy_prediction,
    to_datetime,
)
from maintd.simulate.schedule import Schedule
from maintd.simulate.sizes import SizeModel, learn_sizes
from maintd.table import Snapshot, Table
from maintd.table.log.actions import AddFile

MAX_DAYS = 366
MAX_REPLAYED_WRITES = 2_000_000
"""Most level-0 files one simulation may replay: beyond, the answer would take too long to be of use."""


@dataclass(frozen=True)
class CandidatePolicy:
    """A policy to simulate: a short name for the columns, where it came from, and the effective policy."""

    name: str
    source: str
    policy: Policy


@dataclass(frozen=True)
class Learned:
    """What the simulation starts from: the write pattern, the size model and the starting state."""

    pattern: WritePattern
    sizes: SizeModel
    start: Snapshot


def _recent_files(snapshot: Snapshot, pattern: WritePattern) -> list[AddFile]:
    """Live files and the files the window's merges touched, newest first (footers are read from these)."""
    seen = list(snapshot.files.values())
    seen += [f for m in pattern.merges for f in (*m.outputs, *m.inputs)]
    return sorted(seen, key=lambda f: (f.max_version, f.path), reverse=True)


def learn(table: Table, *, hours: float | None = 24.0, until_version: int | None = None,
          from_version: int | None = None, from_window_start: bool = False,
          sample_bytes: int = SAMPLE_BYTES) -> Learned:
    """Learn the pattern (:func:`learn_pattern`) and the size model of ``table``.

    The simulation starts from the latest state (or the one at ``until_version``), or with
    ``from_window_start`` from the state just before the learning window (to simulate the past). The key
    overlap is sampled from the files only when the log shows no compaction to learn it from.
    """
    pattern = learn_pattern(table, hours=hours, until_version=until_version, from_version=from_version)
    state = table.snapshot(until_version)
    files = _recent_files(state, pattern)
    overheads = measure_overheads(table, files)
    sampled = None
    if not any(m.kind == "compact" for m in pattern.merges):
        sampled = sample_key_overlap(table, state, budget_bytes=sample_bytes)
    sizes = learn_sizes(pattern, state.files.values(), overheads=overheads, sampled_overlap=sampled)
    return Learned(pattern, sizes, table.snapshot(pattern.start_version) if from_window_start else state)


def pattern_summary(learned: Learned) -> PatternSummary:
    """The learned pattern and size model, as the report shows them."""
    p, s = learned.pattern, learned.sizes
    totals = p.totals()
    sizes = {f"overhead_{k}": float(v) for k, v in s.overhead.items()}
    sizes |= {"upsert_row_bytes": round(s.upsert_row_bytes, 2), "delete_row_bytes": round(s.delete_row_bytes, 2),
              "base_fixed_bytes": round(s.base.fixed, 1), "base_row_bytes": round(s.base.slope, 3)}
    for k, line in sorted(s.merge.items()):
        sizes |= {f"level{k}_fixed_bytes": round(line.fixed, 1), f"level{k}_payload_ratio": round(line.slope, 4)}
    if s.prior is not None:
        sizes |= {"prior_fixed_bytes": round(s.prior.fixed, 1), "prior_driver_ratio": round(s.prior.slope, 4)}
    buckets = tuple(BucketRatesModel(partition=dict(r.partition), bucket=r.bucket,
                                     commits_per_hour=round(r.commits_per_hour, 3),
                                     rows_per_commit=round(r.rows_per_commit, 1),
                                     bytes_per_commit=round(r.bytes_per_commit, 1),
                                     delete_share=round(r.delete_share, 4),
                                     key_overlap=round(s.overlap_of(dict(r.partition), r.bucket), 4))
                    for r in p.bucket_rates())
    return PatternSummary(
        window_start=to_datetime(p.start_ms), window_end=to_datetime(p.end_ms), period_hours=round(p.hours, 3),
        commits=len(p.commits), merges_observed=len(p.merges), commits_per_hour=round(totals["commits_per_hour"], 3),
        rows_per_hour=round(totals["rows_per_hour"], 1), bytes_per_hour=round(totals["bytes_per_hour"], 1),
        delete_share=round(totals["delete_share"], 4), buckets_written=int(totals["buckets"]),
        key_overlap=round(s.key_overlap, 4), sizes=sizes, sources=dict(s.sources), buckets=buckets)


def check_days(days: int) -> None:
    if not 1 <= days <= MAX_DAYS:
        raise InvalidInputError(f"--days {days} is out of range: simulate from 1 to {MAX_DAYS} days")


def check_size(pattern: WritePattern, days: int, uri: str) -> None:
    """Refuse a simulation that would replay more than :data:`MAX_REPLAYED_WRITES` level-0 files."""
    per_cycle = sum(w.files for c in pattern.commits for w in c.writes)
    replayed = per_cycle * days * DAY_MS / pattern.period_ms
    if replayed > MAX_REPLAYED_WRITES:
        raise InvalidInputError(
            f"table {uri}: its writes of the learning window ({len(pattern.commits)} commits in "
            f"{pattern.period_ms / 1000:g} s) replayed for {days} day(s) make {replayed:,.0f} files, more than "
            f"{MAX_REPLAYED_WRITES:,} a simulation handles; simulate fewer --days, or learn from a longer and "
            "more typical stretch of writes (--learn-hours)")


def simulate_table(table: Table, policies: Sequence[CandidatePolicy], *, days: int, schedule: Schedule,
                   now: datetime, hours: float | None = 24.0, learned: Learned | None = None,
                   progress: Callable[[str, float], None] | None = None) -> SimulationReport:
    """Predict ``days`` days of ``table`` from ``now`` under each of ``policies``.

    ``progress`` is called with a policy's name and the share of its simulation done.

    Raises:
        InvalidInputError: ``days`` out of range, no policy, or a table with no write history to learn from.
    """
    check_days(days)
    if not policies:
        raise InvalidInputError("give at least one policy to simulate")
    learned = learned or learn(table, hours=hours)
    start_ms = int(now.timestamp() * 1000)
    end_ms = start_ms + days * DAY_MS
    check_size(learned.pattern, days, table.uri)
    runs = []
    for c in policies:
        step = None if progress is None else functools.partial(progress, c.name)
        run = simulate(learned.start, learned.pattern, learned.sizes, c.policy, schedule, start_ms=start_ms,
                       end_ms=end_ms, policy_name=c.name, table_uri=table.uri, sample_ms=HOUR_MS, progress=step)
        runs.append(policy_prediction(c.name, c.source, run, start_ms, days))
    return SimulationReport(
        table_uri=table.uri, start=to_datetime(start_ms), days=days, retain_hours=learned.start.retain_hours,
        pattern=pattern_summary(learned),
        schedule=ScheduleSummary(maintenance_interval_seconds=schedule.maintenance_interval_s,
                                 reclamation_interval_seconds=schedule.reclamation_interval_s,
                                 source=schedule.source),
        policies=tuple(runs))


def unique_names(names: Iterable[str]) -> list[str]:
    """``names`` with repeats numbered (``a``, ``a#2``), so every column of the report has its own name."""
    out: list[str] = []
    for n in names:
        k, name = 1, n
        while name in out:
            k += 1
            name = f"{n}#{k}"
        out.append(name)
    return out


__all__ = ["MAX_DAYS", "MAX_REPLAYED_WRITES", "CandidatePolicy", "Learned", "check_days", "check_size", "learn",
           "pattern_summary", "simulate_table", "unique_names"]
