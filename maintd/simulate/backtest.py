"""Simulating the past: replay a table's recorded writes under a policy and compare with what really happened.

The learning window becomes the whole stretch to check. The simulation starts from the state just before its
first writer commit, replays exactly the commits writers made (at their times), runs maintenance at the
daemon's cadence (or at the recorded run times, which is what makes the comparison fair when they exist), and
is sampled every hour. The real table is sampled at the same times by replaying its log. The error of a
sample is the relative L1 distance of the files-per-level vectors, ``sum(|predicted - actual|) / sum(actual)``
over L0, L1, L2 and base files, so a level with few files weighs as little as it counts.

This is how ``maintd simulate --backtest`` shows how far the simulator can be trusted on a given table, and
how the test suite validates the simulator against reality.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict

from maintd.simulate.engine import LEVELS, Sample, level_of, simulate
from maintd.simulate.pattern import HOUR_MS
from maintd.simulate.report import DAY_MS, ScheduleSummary, to_datetime
from maintd.simulate.schedule import Schedule
from maintd.simulate.simulator import CandidatePolicy, Learned, learn
from maintd.table import Table
from maintd.table.log.actions import AddFile, CommitInfo, RemoveFile

SLACK_MS = 1000
"""Real commits up to this long after a sample time count as at it: commits made at one instant are spread over
a few milliseconds by the log (each commit time is at least the previous one plus 1 ms)."""


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class LevelComparison(_Model):
    """Files per level predicted and really found, at one time (or averaged over one day)."""

    label: str
    hours: float
    predicted: dict[str, float]
    actual: dict[str, float]
    error: float | None


class BacktestReport(_Model):
    """How well the simulation of a table's past under one policy matched what really happened."""

    table_uri: str
    policy: str
    start: str
    end: str
    hours: float
    schedule: ScheduleSummary
    samples: tuple[LevelComparison, ...]
    days: tuple[LevelComparison, ...]
    final: LevelComparison

    @property
    def mean_error(self) -> float | None:
        errs = [s.error for s in self.samples if s.error is not None]
        return sum(errs) / len(errs) if errs else None

    @property
    def max_error(self) -> float | None:
        return max((s.error for s in self.samples if s.error is not None), default=None)


def files_error(predicted: Mapping[str, float], actual: Mapping[str, float]) -> float | None:
    """``sum(|predicted - actual|) / sum(actual)`` over the levels; None when there were no files."""
    total = sum(actual.get(k, 0) for k in LEVELS)
    if total <= 0:
        return None
    return round(sum(abs(predicted.get(k, 0) - actual.get(k, 0)) for k in LEVELS) / total, 4)


def _compare(label: str, hours: float, predicted: Mapping[str, float], actual: Mapping[str, float]
             ) -> LevelComparison:
    p = {k: float(predicted.get(k, 0)) for k in LEVELS}
    a = {k: float(actual.get(k, 0)) for k in LEVELS}
    return LevelComparison(label=label, hours=round(hours, 3), predicted=p, actual=a, error=files_error(p, a))


@dataclass(frozen=True)
class Actual:
    """The real table at one sample time: files per level, and file-hours per level since the first sample."""

    files: dict[str, int]
    file_hours: dict[str, float]


def actual_levels(table: Table, learned: Learned, times: Sequence[int]) -> list[Actual]:
    """The real table at each of ``times`` (ascending), by replaying its log from the simulation's start."""
    files: dict[str, AddFile] = dict(learned.start.files)
    levels = Counter(level_of(f) for f in files.values())
    area: Counter[str] = Counter()
    out: list[Actual] = []
    last = times[0] if times else 0

    def advance(to: int) -> None:
        nonlocal last
        if to > last:
            for k, n in levels.items():
                area[k] += n * (to - last)
            last = to

    v = learned.start.version + 1
    pending = table.log.read_commit(v)
    for t in times:
        while pending is not None:
            info = next((a for a in pending if isinstance(a, CommitInfo)), None)
            if info is not None and info.timestamp > t + SLACK_MS:
                break
            advance(min(info.timestamp if info else t, t))
            for a in pending:
                if isinstance(a, RemoveFile) and a.path in files:
                    levels[level_of(files.pop(a.path))] -= 1
                elif isinstance(a, AddFile):
                    files[a.path] = a
                    levels[level_of(a)] += 1
            v += 1
            pending = table.log.read_commit(v)
        advance(t)
        out.append(Actual({k: levels.get(k, 0) for k in LEVELS}, {k: area.get(k, 0) / HOUR_MS for k in LEVELS}))
    return out


def _day_means(samples: Sequence[Sample], actual: Sequence[Actual], start_ms: int) -> list[LevelComparison]:
    """Per day, the time-weighted mean files per level, predicted and real."""
    out = []
    day = 1
    while samples and start_ms + (day - 1) * DAY_MS < samples[-1].time_ms:
        lo, hi = start_ms + (day - 1) * DAY_MS, start_ms + day * DAY_MS
        i = max(k for k, s in enumerate(samples) if s.time_ms <= lo)
        j = max(k for k, s in enumerate(samples) if s.time_ms <= hi)
        hours = (samples[j].time_ms - samples[i].time_ms) / HOUR_MS
        if hours > 0:
            p = {k: (samples[j].file_hours[k] - samples[i].file_hours[k]) / hours for k in LEVELS}
            a = {k: (actual[j].file_hours[k] - actual[i].file_hours[k]) / hours for k in LEVELS}
            out.append(_compare(f"day {day} (mean over {hours:g} h)", (samples[j].time_ms - start_ms) / HOUR_MS,
                                p, a))
        day += 1
    return out


def backtest(table: Table, policy: CandidatePolicy, schedule: Schedule, *, hours: float | None = None,
             until_version: int | None = None, from_version: int | None = None,
             learned: Learned | None = None) -> BacktestReport:
    """Simulate the table's retained past (or ``hours`` of it) under ``policy`` and compare with reality.

    Raises:
        InvalidInputError: the stretch holds no writer commit.
    """
    learned = learned or learn(table, hours=hours, until_version=until_version, from_version=from_version,
                               from_window_start=True)
    end = table.snapshot(until_version)
    return compare_with_log(table, learned, policy, schedule, start_ms=learned.start.timestamp,
                            end_ms=end.timestamp)


def compare_with_log(table: Table, learned: Learned, policy: CandidatePolicy, schedule: Schedule, *,
                     start_ms: int, end_ms: int) -> BacktestReport:
    """Simulate from ``learned`` over ``[start_ms, end_ms]`` and compare, hour by hour, with the table's log.

    With ``learned`` from the whole stretch (:func:`backtest`) the recorded writes are replayed as they were;
    with ``learned`` from an earlier stretch the comparison checks a forecast: the pattern learned before
    ``start_ms`` replayed forward against what writers and maintenance really did after it.
    """
    run = simulate(learned.start, learned.pattern, learned.sizes, policy.policy, schedule, start_ms=start_ms,
                   end_ms=end_ms, policy_name=policy.name, table_uri=table.uri)
    samples = list(run.samples)
    actual = actual_levels(table, learned, [s.time_ms for s in samples])
    points = tuple(_compare(to_datetime(s.time_ms).isoformat(), (s.time_ms - start_ms) / HOUR_MS, s.files, a.files)
                   for s, a in zip(samples, actual, strict=True))
    return BacktestReport(
        table_uri=table.uri, policy=policy.name, start=to_datetime(start_ms).isoformat(),
        end=to_datetime(end_ms).isoformat(), hours=round((end_ms - start_ms) / HOUR_MS, 3),
        schedule=ScheduleSummary(maintenance_interval_seconds=schedule.maintenance_interval_s,
                                 reclamation_interval_seconds=schedule.reclamation_interval_s,
                                 source=schedule.source),
        samples=points, days=tuple(_day_means(samples, actual, start_ms)),
        final=_compare("end", points[-1].hours, points[-1].predicted, points[-1].actual))


__all__ = ["SLACK_MS", "Actual", "BacktestReport", "LevelComparison", "actual_levels", "backtest", "compare_with_log",
           "files_error"]
