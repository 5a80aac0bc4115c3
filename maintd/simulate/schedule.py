"""When simulated maintenance and reclamation run: the daemon's schedule, or the runs it recorded.

The daemon runs a maintenance pass over every table every ``scheduler.maintenance_interval_seconds`` and a
reclamation pass every ``scheduler.reclamation_interval_seconds``, the first ones as soon as it starts. Where
the daemon's state store holds recorded runs of the table, they are used instead: their median spacing is the
cadence the table really gets (backoffs, a busy daemon and restarts included), and when the past is simulated
the recorded start times are used as they are. This module takes the runs as plain values; reading them from
the store is the caller's business, so the simulator needs no database library.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

MAINTENANCE = "maintenance"
RECLAIM = "reclaim"


@dataclass(frozen=True, slots=True)
class RecordedRun:
    """A run the daemon recorded for the table: its kind (``maintenance`` or ``reclaim``) and start (epoch ms)."""

    kind: str
    started_ms: int


@dataclass(frozen=True)
class Schedule:
    """The simulated cadence: intervals (seconds), where they came from, and optionally exact run times.

    The intervals have no defaults here: they are the daemon's settings (``scheduler`` group), which the
    caller reads, so the simulator and the daemon never disagree on a default.

    With ``maintenance_times_ms`` (or ``reclamation_times_ms``), passes run at those times inside the range
    they cover and at the interval outside it.
    """

    maintenance_interval_s: float
    reclamation_interval_s: float
    source: str = "given"
    maintenance_times_ms: tuple[int, ...] = ()
    reclamation_times_ms: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.maintenance_interval_s <= 0 or self.reclamation_interval_s <= 0:
            raise ValueError("schedule intervals must be positive seconds")

    def maintenance_at(self, start_ms: int, end_ms: int) -> list[int]:
        """Times of the maintenance passes in ``[start_ms, end_ms]``."""
        return _times(self.maintenance_times_ms, self.maintenance_interval_s, start_ms, end_ms)

    def reclamation_at(self, start_ms: int, end_ms: int) -> list[int]:
        """Times of the reclamation passes in ``[start_ms, end_ms]``."""
        return _times(self.reclamation_times_ms, self.reclamation_interval_s, start_ms, end_ms)


def _times(exact: Sequence[int], interval_s: float, start_ms: int, end_ms: int) -> list[int]:
    """Exact times where they exist, and passes every ``interval_s`` from ``start_ms`` elsewhere."""
    step = max(1, int(interval_s * 1000))
    inside = sorted(t for t in exact if start_ms <= t <= end_ms)
    if not inside:
        return list(range(start_ms, end_ms + 1, step))
    before = list(range(inside[0] - step, start_ms - 1, -step))[::-1]
    after = list(range(inside[-1] + step, end_ms + 1, step))
    return before + inside + after


def _median_gap(times: Iterable[int]) -> float | None:
    ordered = sorted(set(times))
    gaps = [b - a for a, b in itertools.pairwise(ordered)]
    return statistics.median(gaps) / 1000 if gaps else None


def schedule_from_runs(runs: Iterable[RecordedRun], fallback: Schedule) -> Schedule:
    """``fallback`` with the cadence and times of the recorded runs of each kind that has at least two."""
    runs = list(runs)
    maint = [r.started_ms for r in runs if r.kind == MAINTENANCE]
    recl = [r.started_ms for r in runs if r.kind == RECLAIM]
    m_gap, r_gap = _median_gap(maint), _median_gap(recl)
    if m_gap is None and r_gap is None:
        return fallback
    kinds = [k for k, g in ((MAINTENANCE, m_gap), (RECLAIM, r_gap)) if g is not None]
    return replace(
        fallback,
        maintenance_interval_s=m_gap or fallback.maintenance_interval_s,
        reclamation_interval_s=r_gap or fallback.reclamation_interval_s,
        source=f"recorded {' and '.join(kinds)} runs" + ("" if len(kinds) == 2 else f", {fallback.source}"),
        maintenance_times_ms=tuple(sorted(set(maint))) if m_gap else (),
        reclamation_times_ms=tuple(sorted(set(recl))) if r_gap else (),
    )


__all__ = ["MAINTENANCE", "RECLAIM", "RecordedRun", "Schedule", "schedule_from_runs"]
