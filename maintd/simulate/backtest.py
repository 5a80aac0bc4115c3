"""Simulating the past: replay a table's recorded writes under a policy and compare with what really happened.

The learning window becomes the whole stretch to check: the simulation starts from the state just before its
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

from pydantic import BaseModel, ConfigDict

from maintd.simulate.engine import LEVELS, Sample, level_of, simulate
from maintd.simulate.pattern import HOUR_MS
from maintd.simulate.report import DAY_MS, ScheduleSummary, to_datetime
from maintd.simulate.schedule import Schedule
from maintd.simulate.simulator import CandidatePolicy, Learned, learn
from maintd.table import Table
from maintd.table.actions import AddFile, CommitInfo, RemoveFile

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


def actual_levels(table: Table, learned: Learned, times: Sequence[int]) -> list[dict[str, int]]:
    """Files per level of the real table at each of ``times`` (ascending), by replaying its log."""
    files: dict[str, AddFile] = dict(learned.start.files)
    levels = Counter(level_of(f) for f in files.values())
    out: list[dict[str, int]] = []
    v = learned.start.version + 1
    pending = table.log.read_commit(v)
    for t in times:
        while pending is not None:
            info = next((a for a in pending if isinstance(a, CommitInfo)), None)
            if info is not None and info.timestamp > t + SLACK_MS:
                break
            for a in pending:
                if isinstance(a, RemoveFile) and a.path in files:
                    levels[level_of(files.pop(a.path))] -= 1
                elif isinstance(a, AddFile):
                    files[a.path] = a
                    levels[level_of(a)] += 1
            v += 1
            pending = table.log.read_commit(v)
        out.append({k: levels.get(k, 0) for k in LEVELS})
    return out


def _day_means(samples: Sequence[Sample], actual: Sequence[Mapping[str, int]], start_ms: int
               ) -> list[LevelComparison]:
    out = []
    day = 1
    while samples and start_ms + (day - 1) * DAY_MS < samples[-1].time_ms:
        lo, hi = start_ms + (day - 1) * DAY_MS, start_ms + day * DAY_MS
        idx = [i for i, s in enumerate(samples) if lo < s.time_ms <= hi]
        if idx:
            p = {k: sum(samples[i].files[k] for i in idx) / len(idx) for k in LEVELS}
            a = {k: sum(actual[i][k] for i in idx) / len(idx) for k in LEVELS}
            hours = (samples[idx[-1]].time_ms - start_ms) / HOUR_MS
            out.append(_compare(f"day {day} (mean of {len(idx)} samples)", hours, p, a))
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
    start_ms, end_ms = learned.start.timestamp, end.timestamp
    run = simulate(learned.start, learned.pattern, learned.sizes, policy.policy, schedule, start_ms=start_ms,
                   end_ms=end_ms, policy_name=policy.name, table_uri=table.uri)
    samples = list(run.samples)
    actual = actual_levels(table, learned, [s.time_ms for s in samples])
    points = tuple(_compare(to_datetime(s.time_ms).isoformat(), (s.time_ms - start_ms) / HOUR_MS, s.files, a)
                   for s, a in zip(samples, actual, strict=True))
    return BacktestReport(
        table_uri=table.uri, policy=policy.name, start=to_datetime(start_ms).isoformat(),
        end=to_datetime(end_ms).isoformat(), hours=round((end_ms - start_ms) / HOUR_MS, 3),
        schedule=ScheduleSummary(maintenance_interval_seconds=schedule.maintenance_interval_s,
                                 reclamation_interval_seconds=schedule.reclamation_interval_s,
                                 source=schedule.source),
        samples=points, days=tuple(_day_means(samples, actual, start_ms)),
        final=_compare("end", points[-1].hours, points[-1].predicted, points[-1].actual))


__all__ = ["SLACK_MS", "BacktestReport", "LevelComparison", "actual_levels", "backtest", "files_error"]
