"""How far a table is from its targets: the order in which a binding maintenance budget serves tables.

A table's *distance* is the largest ratio of one of its measures to that measure's target (1.0: exactly at a
target; above: beyond it), so the table furthest beyond any one target comes first, whatever the measure.
The measures are those the state store keeps for every table (read amplification, the age of the oldest
level-0 file, the backlog of bytes a plan would rewrite now). A table's declared targets
(:class:`~maintd.planner.targets.Targets`: ``read_files_per_bucket`` bounds the read amplification,
``merge_delay_minutes`` the level-0 age) replace the defaults; a measure with no declared target is measured
against :data:`DEFAULT_TARGETS`, a default health score. Pure: the caller gives ``now``.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from maintd.planner.targets import Targets

DEFAULT_TARGETS: Mapping[str, float] = {
    "read_amplification": 8.0,
    "l0_age_seconds": 3600.0,
    "backlog_bytes": float(1 << 30),
}
"""Files a reader of one bucket opens at most, seconds the oldest level-0 file waits for clustering, bytes a
plan would rewrite now: the targets of a table that has none of its own."""


def _declared(targets: Targets) -> dict[str, float]:
    """A table's declared targets in the units of :func:`table_measures`."""
    out: dict[str, float] = {}
    if targets.read_files_per_bucket is not None:
        out["read_amplification"] = targets.read_files_per_bucket
    if targets.merge_delay_minutes is not None:
        out["l0_age_seconds"] = targets.merge_delay_minutes * 60.0
    return out


def _target(targets: Any, name: str) -> float:
    """``name`` of ``targets`` (declared :class:`Targets`, a mapping or an object with that attribute), else the
    default."""
    if isinstance(targets, Targets):
        targets = _declared(targets)
    value = targets.get(name) if isinstance(targets, Mapping) else getattr(targets, name, None)
    return float(value) if isinstance(value, int | float) and value > 0 else DEFAULT_TARGETS[name]


def table_measures(layout: Mapping[str, Any], now: datetime) -> dict[str, float]:
    """The measures of a stored layout (``read_amplification``, ``oldest_l0_ms``, ``backlog_bytes``; absent or
    None: not measured) as ``read_amplification``, ``l0_age_seconds`` and ``backlog_bytes``."""
    out: dict[str, float] = {}
    if isinstance(amp := layout.get("read_amplification"), int | float):
        out["read_amplification"] = float(amp)
    if isinstance(oldest := layout.get("oldest_l0_ms"), int | float):
        out["l0_age_seconds"] = max(0.0, now.timestamp() - oldest / 1000)
    if isinstance(backlog := layout.get("backlog_bytes"), int | float):
        out["backlog_bytes"] = float(backlog)
    return out


def distance_from_targets(layout: Mapping[str, Any], targets: Any | None, now: datetime) -> float:
    """The largest ratio of a measure of ``layout`` to its target (``targets``: the table's declared
    :class:`Targets`, or a mapping or an object with ``read_amplification``, ``l0_age_seconds``,
    ``backlog_bytes``; None or a missing one: the default);
    0.0 for a table with no measure."""
    measures = table_measures(layout, now)
    return max((value / _target(targets, name) for name, value in measures.items()), default=0.0)


__all__ = ["DEFAULT_TARGETS", "distance_from_targets", "table_measures"]
