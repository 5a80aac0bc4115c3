"""The typed rows the state store returns and takes: frozen, so callers cannot mistake them for live rows."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from maintd.service.run_kinds import RunKind, RunStatus

__all__ = ["CheckRecord", "Decision", "DecisionRecord", "LeaseRecord", "RootRecord", "RunKind", "RunRecord",
           "RunResult", "RunStatus", "TableRecord", "TuningRecord"]


@dataclass(frozen=True, slots=True)
class TableRecord:
    """A registered table and the outcome of its last run."""

    uri: str
    name: str
    source: str
    registered_at: datetime
    enabled: bool
    last_status: str | None
    last_run_at: datetime | None
    last_error: str | None
    maintenance_failures: int
    maintenance_retry_after: datetime | None
    reclaim_failures: int
    reclaim_retry_after: datetime | None
    layout: dict[str, Any] | None = None
    """Files and bytes (in all and per level) and backlog, as the last maintenance run read them."""
    layout_at: datetime | None = None
    maintenance_succeeded_at: datetime | None = None
    reclaim_succeeded_at: datetime | None = None
    checked_at: datetime | None = None
    """When the replica that owns the table last checked it (a look at its log, a plan if it changed)."""
    checked_by: str | None = None
    """The replica that checked it then."""
    checks: int = 0
    """Checks of the table's maintenance since it was registered (those that found nothing included)."""
    checks_planned: int = 0
    """Of those, the checks that planned: the table had changed, or a time trigger was due."""
    layout_read_amplification: float | None = None
    layout_oldest_l0_ms: float | None = None
    layout_history_bytes: float | None = None
    layout_pinned_bytes: float | None = None
    """The layout's measures the fleet-wide histograms read, kept in columns of their own (store revision 0006)."""

    def succeeded_at(self, kind: RunKind | str) -> datetime | None:
        """When a run of ``kind`` last succeeded (or found nothing to do)."""
        return self.maintenance_succeeded_at if RunKind(kind) is RunKind.MAINTENANCE else self.reclaim_succeeded_at

    def failures(self, kind: RunKind | str) -> int:
        """Consecutive failed runs of ``kind`` (reset by a run of that kind that succeeds)."""
        return int(self.maintenance_failures if RunKind(kind) is RunKind.MAINTENANCE else self.reclaim_failures)

    def retry_after_of(self, kind: RunKind | str) -> datetime | None:
        """When runs of ``kind`` may be retried after failures (None: not backing off)."""
        return self.maintenance_retry_after if RunKind(kind) is RunKind.MAINTENANCE else self.reclaim_retry_after

    @property
    def consecutive_failures(self) -> int:
        """Consecutive failures, over both kinds (0: healthy)."""
        return self.maintenance_failures + self.reclaim_failures

    @property
    def retry_after(self) -> datetime | None:
        """The latest retry time over both kinds (None: not backing off)."""
        times = [t for t in (self.maintenance_retry_after, self.reclaim_retry_after) if t is not None]
        return max(times) if times else None


@dataclass(frozen=True, slots=True)
class CheckRecord:
    """Checks of one table since the last write, to be added onto the table's row (``StateStore.record_checks``)."""

    uri: str
    kind: RunKind
    checked_at: datetime
    checks: int
    planned: int
    found_nothing: bool
    """The last of them found nothing to do: the table counts as maintained (its last success) then."""
    layout: dict[str, Any] | None = None
    """The layout a check that planned read (None: unchanged, keep the stored one)."""


@dataclass(frozen=True, slots=True)
class RootRecord:
    """The last search of a warehouse root for tables."""

    uri: str
    checked_at: datetime
    holder: str | None
    tables: int
    error: str | None
    error_type: str | None
    failures: int
    succeeded_at: datetime | None

    @property
    def healthy(self) -> bool:
        return self.error is None


@dataclass(frozen=True, slots=True)
class RunRecord:
    """One maintenance or reclamation run of one table."""

    id: int
    table_uri: str
    kind: str
    status: str
    holder: str | None
    started_at: datetime
    ended_at: datetime | None
    plan: Any
    metrics: dict[str, Any] | None
    error: str | None

    @property
    def duration_seconds(self) -> float | None:
        """Seconds from start to end, None while running."""
        return None if self.ended_at is None else (self.ended_at - self.started_at).total_seconds()


@dataclass(frozen=True, slots=True)
class Decision:
    """Why the planner did (or did not) act on one bucket: the ``--explain`` reasons."""

    partition: str
    bucket: int | None
    action: str
    rule: str
    message: str


@dataclass(frozen=True, slots=True)
class DecisionRecord:
    """A stored :class:`Decision` of a run."""

    id: int
    run_id: int
    decision: Decision


@dataclass(frozen=True, slots=True)
class LeaseRecord:
    """Who holds the lease of a table, and until when (database clock)."""

    table_uri: str
    holder: str | None
    acquired_at: datetime | None
    expires_at: datetime


@dataclass(frozen=True, slots=True)
class RunResult:
    """What a maintenance or reclamation callable returns to the daemon.

    A ``FAILED`` result is handled like a raised exception (recorded with ``error``, counted under
    ``error_type``, retried after a backoff); an ``ABANDONED`` one is recorded without a backoff.
    """

    status: RunStatus = RunStatus.SUCCEEDED
    plan: Any = None
    metrics: dict[str, Any] = field(default_factory=dict)
    decisions: tuple[Decision, ...] = ()
    error: str | None = None
    error_type: str | None = None
    layout: dict[str, Any] | None = None
    """The table's layout as the run left it (files, bytes, levels, backlog), stored on the table's row."""


@dataclass(frozen=True, slots=True)
class TuningRecord:
    """A table that declares targets: its targets, the figures measured against them, and its last re-tune."""

    uri: str
    targets: dict[str, float]
    """The declared targets by name (maintd.planner.targets)."""
    measured: dict[str, float]
    """The measured figures by target name (those that could be measured)."""
    gaps: dict[str, float]
    """``measured / target - 1`` by target name: positive is missed by that share."""
    measured_at: datetime | None = None
    overrides: dict[str, Any] | None = None
    """The knobs the daemon applied (nested), used when planning the table under explicit table properties."""
    interval_seconds: float | None = None
    """The check interval the last re-tune stepped to."""
    tuned_at: datetime | None = None
    reason: str | None = None
    predicted: dict[str, float] | None = None
    """What the tuner predicted for its tuned policy, by target name."""
    tuned_measured: dict[str, float] | None = None
    """The figures measured when the table was last re-tuned."""
    error: str | None = None
    """Why the last re-tune failed (None: it did not)."""
    error_at: datetime | None = None

    @property
    def missed(self) -> list[str]:
        """The targets the measured figures miss, largest gap first."""
        return sorted((n for n, g in self.gaps.items() if g > 1e-9), key=lambda n: -self.gaps[n])
