"""The predictions: frozen models of what the simulation of each policy foretells, per day and over time.

A report holds, per policy and per simulated day: files per level (at the end of the day and on average);
read amplification (files a read merges per bucket). It also holds write amplification (bytes maintenance wrote per byte
writers wrote); maintenance tasks and bytes; reclaimed and reclaimable bytes; the history kept for time travel;
and the age of the oldest row version still in a DeltaFile. It adds an hourly series for plots and
round-trips through JSON (``maintd simulate --json``).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from pydantic import BaseModel, ConfigDict

from maintd.simulate.engine import LEVELS, Run, Sample
from maintd.simulate.pattern import HOUR_MS

DAY_MS = 24 * HOUR_MS


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


def to_datetime(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)


class DayPrediction(_Model):
    """One simulated day of one policy. Work counters cover the day; states are at its end, except the ``_mean``
    ones, which are averaged over the day's time (time-weighted, exactly)."""

    day: int
    end: datetime
    files: dict[str, int]
    files_mean: dict[str, float]
    bytes: dict[str, int]
    read_amplification: float
    read_amplification_max: int
    read_amplification_mean: float
    write_amplification: float | None
    writer_bytes: int
    maintenance_tasks: dict[str, int]
    maintenance_bytes_read: int
    maintenance_bytes_written: int
    reclaimed_bytes: int
    reclaimable_bytes: int
    reclaimable_bytes_max: int
    history_bytes: int
    history_hours: float
    history_hours_max: float
    oldest_delta_hours: float

    @property
    def total_files(self) -> int:
        return sum(self.files.values())


class SeriesPoint(_Model):
    """One point of the hourly series: files per level and read amplification averaged over the hour before
    it (time-weighted, so passes that fall on the hour do not hide what piles up between them), and the write
    amplification from the start up to it."""

    hours: float
    files: dict[str, float]
    read_amplification: float
    write_amplification: float | None


class PolicyPrediction(_Model):
    """Everything predicted for one candidate policy."""

    name: str
    source: str
    passes: int
    busy_passes: int
    days: tuple[DayPrediction, ...]
    series: tuple[SeriesPoint, ...]
    write_amplification: float | None
    maintenance_tasks: dict[str, int]
    maintenance_bytes_read: int
    maintenance_bytes_written: int


class BucketRatesModel(_Model):
    """The learned rates of one (partition, bucket)."""

    partition: dict[str, str | None]
    bucket: int
    commits_per_hour: float
    rows_per_commit: float
    bytes_per_commit: float
    delete_share: float
    key_overlap: float


class PatternSummary(_Model):
    """What was learned from the log: the window, the table-wide rates, the size model and per-bucket rates."""

    window_start: datetime
    window_end: datetime
    period_hours: float
    commits: int
    merges_observed: int
    commits_per_hour: float
    rows_per_hour: float
    bytes_per_hour: float
    delete_share: float
    buckets_written: int
    key_overlap: float
    sizes: dict[str, float]
    sources: dict[str, str]
    buckets: tuple[BucketRatesModel, ...]


class ScheduleSummary(_Model):
    maintenance_interval_seconds: float
    reclamation_interval_seconds: float
    source: str


class SimulationReport(_Model):
    """The predictions of every candidate policy, side by side, for one table."""

    table_uri: str
    start: datetime
    days: int
    retain_hours: int
    pattern: PatternSummary
    schedule: ScheduleSummary
    policies: tuple[PolicyPrediction, ...]


def _ratio(num: int, den: int) -> float | None:
    return round(num / den, 4) if den else None


def _at_or_before(samples: Sequence[Sample], t: int) -> Sample:
    return max((s for s in samples if s.time_ms <= t), key=lambda s: s.time_ms)


def day_prediction(samples: Sequence[Sample], start_ms: int, day: int) -> DayPrediction:
    """The ``day``-th day (1-based) from ``start_ms``, from samples that include both of its ends."""
    lo, hi = start_ms + (day - 1) * DAY_MS, start_ms + day * DAY_MS
    first, last = _at_or_before(samples, lo), _at_or_before(samples, hi)
    hours = max(1e-9, (last.time_ms - first.time_ms) / HOUR_MS)
    inside = [x for x in samples if lo <= x.time_ms <= hi]
    written = last.writer_bytes - first.writer_bytes
    m_written = last.maintenance_written - first.maintenance_written
    return DayPrediction(
        day=day, end=to_datetime(last.time_ms), files=dict(last.files),
        files_mean={k: round((last.file_hours[k] - first.file_hours[k]) / hours, 2) for k in LEVELS},
        bytes=dict(last.bytes), read_amplification=round(last.read_amp_mean, 3),
        read_amplification_max=last.read_amp_max,
        read_amplification_mean=round((last.read_amp_hours - first.read_amp_hours) / hours, 3),
        write_amplification=_ratio(m_written, written), writer_bytes=written,
        maintenance_tasks={k: last.tasks[k] - first.tasks[k] for k in last.tasks},
        maintenance_bytes_read=last.maintenance_read - first.maintenance_read, maintenance_bytes_written=m_written,
        reclaimed_bytes=last.reclaimed_bytes - first.reclaimed_bytes, reclaimable_bytes=last.reclaimable_bytes,
        history_bytes=last.history_bytes, history_hours=round(last.history_hours, 2),
        history_hours_max=round(max(x.history_hours for x in inside), 2),
        reclaimable_bytes_max=max(x.reclaimable_bytes for x in inside),
        oldest_delta_hours=round(last.oldest_delta_hours, 2))


def _point(prev: Sample, x: Sample, start_ms: int, first: Sample) -> SeriesPoint:
    hours = (x.time_ms - prev.time_ms) / HOUR_MS
    if hours > 0:
        files = {k: round((x.file_hours[k] - prev.file_hours[k]) / hours, 2) for k in LEVELS}
        read = (x.read_amp_hours - prev.read_amp_hours) / hours
    else:  # the first point: the state at the start
        files, read = {k: float(x.files[k]) for k in LEVELS}, x.read_amp_mean
    return SeriesPoint(hours=round((x.time_ms - start_ms) / HOUR_MS, 3), files=files,
                       read_amplification=round(read, 3),
                       write_amplification=_ratio(x.maintenance_written - first.maintenance_written,
                                                  x.writer_bytes - first.writer_bytes))


def policy_prediction(name: str, source: str, run: Run, start_ms: int, days: int) -> PolicyPrediction:
    """Per-day predictions and the hourly series of one simulated policy."""
    s = run.samples
    first, last = s[0], s[-1]
    series = tuple(_point(prev, x, start_ms, first) for prev, x in zip((s[0], *s), s, strict=False))
    return PolicyPrediction(
        name=name, source=source, passes=run.passes, busy_passes=run.busy_passes,
        days=tuple(day_prediction(s, start_ms, d) for d in range(1, days + 1)), series=series,
        write_amplification=_ratio(last.maintenance_written - first.maintenance_written,
                                   last.writer_bytes - first.writer_bytes),
        maintenance_tasks={k: last.tasks[k] - first.tasks[k] for k in last.tasks},
        maintenance_bytes_read=last.maintenance_read - first.maintenance_read,
        maintenance_bytes_written=last.maintenance_written - first.maintenance_written)


__all__ = ["DAY_MS", "BucketRatesModel", "DayPrediction", "PatternSummary", "PolicyPrediction", "ScheduleSummary",
           "SeriesPoint", "SimulationReport", "day_prediction", "policy_prediction", "to_datetime"]
