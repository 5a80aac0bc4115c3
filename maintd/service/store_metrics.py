"""The gauges whose one source of truth is the state store, read at every scrape.

With several replicas, a gauge set by the replica that last maintained a table would go stale on the others.
So the state of a table (layout, backlog, pins, layout measures, last success, failures) is written to the
table's row in the store by whichever replica ran it, and every replica's ``/metrics`` reads those rows when
scraped: all replicas serve the same value (aggregate them with ``max by``, never ``sum``). Counters and
histograms stay per replica.

Served from the store: the per-table gauges (``maintd_table_*``, ``maintd_backlog_*``,
``maintd_last_success_timestamp_seconds``); the fleet-wide gauge histograms of the layout measures
(``maintd_fleet_*``, a few numbers a table extracted by the database). ``maintd_tables``,
``maintd_leases_held`` and the roots' health, counted by the database; and ``maintd_store_up``, 0 when the
store did not answer, the other store gauges then being absent rather than stale. Only enabled tables have
series.

Per-table gauges are served for every enabled table while at most ``metrics.table_series_max_tables`` are
registered, else for the ``metrics.unhealthiest_tables`` unhealthiest only, so ``/metrics`` stays small
whatever the size of the warehouse.

docs/operations.md ("Metrics") lists every series and its meaning.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Protocol

from loguru import logger
from prometheus_client.core import GaugeHistogramMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from maintd.errors import MaintdError
from maintd.service.aggregates import MEASURES, GaugeReads
from maintd.service.records import RunKind, TableRecord, TuningRecord
from maintd.target_names import TARGET_NAMES

if TYPE_CHECKING:
    from maintd.settings import MetricsSettings


class GaugeSource(Protocol):
    """What the gauges read: :class:`~maintd.service.store.StateStore` is one."""

    def gauge_reads(self, max_tables: int | None, unhealthiest: int) -> GaugeReads: ...


class StoreGauges(Collector):
    """A Prometheus collector reading the store gauges (see the module docstring) at every scrape.

    Args:
        source: the state store.
        settings: the bounds of the per-table gauges (None: every table's).
    """

    def __init__(self, source: GaugeSource, settings: MetricsSettings | None = None) -> None:
        self._source = source
        self._max_tables = None if settings is None else settings.table_series_max_tables
        self._unhealthiest = 0 if settings is None else settings.unhealthiest_tables
        self._failing = False

    def describe(self) -> Iterator[GaugeMetricFamily | GaugeHistogramMetricFamily]:
        yield from _families().values()
        yield from _fleet_histograms([], 0.0)

    def collect(self) -> Iterator[GaugeMetricFamily | GaugeHistogramMetricFamily]:
        families = _families()
        try:
            reads = self._source.gauge_reads(self._max_tables, self._unhealthiest)
        except MaintdError as exc:
            if not self._failing:  # once per outage, not once per scrape
                logger.warning("the state store gauges are not served while the store fails: {}", exc)
            self._failing = True
            families["maintd_store_up"].add_metric([], 0)
            yield families["maintd_store_up"]
            return
        self._failing = False
        families["maintd_store_up"].add_metric([], 1)
        for state in ("healthy", "failing", "disabled"):
            families["maintd_tables"].add_metric([state], reads.table_counts.get(state, 0))
        for holder, count in sorted(reads.lease_counts.items()):
            families["maintd_leases_held"].add_metric([holder], count)
        now = time.time()
        for record in reads.tables:
            _add_table(families, record, now)
        for name in TARGET_NAMES:
            families["maintd_tables_missing_target"].add_metric([name], reads.missing_targets.get(name, 0))
        for tuned in reads.tuning.values():
            _add_targets(families, tuned)
        for root in reads.roots:
            families["maintd_root_healthy"].add_metric([root.uri], 1 if root.healthy else 0)
            families["maintd_root_tables"].add_metric([root.uri], root.tables)
        yield from families.values()
        yield from _fleet_histograms(reads.measures, now)


#: Bucket bounds of the fleet-wide histograms, by measure (+Inf is added).
FLEET_BUCKETS: dict[str, tuple[float, ...]] = {
    "read_amplification": (1, 2, 4, 8, 16, 32, 64, 128, 256, 1024),
    "oldest_l0_age_seconds": (60, 300, 900, 3600, 3 * 3600, 6 * 3600, 12 * 3600, 86400, 2 * 86400, 7 * 86400),
    "history_bytes": (0, 2**20, 2**24, 2**27, 2**30, 2**33, 2**36, 2**39, 2**42),
    "pinned_bytes": (0, 2**20, 2**24, 2**27, 2**30, 2**33, 2**36, 2**39, 2**42),
}
_FLEET_HELP = {
    "read_amplification": "Enabled tables by the files a reader of their fullest bucket opens.",
    "oldest_l0_age_seconds": "Enabled tables with level-0 files, by the age of their oldest one (seconds).",
    "history_bytes": "Enabled tables by the bytes of removed files kept for older versions.",
    "pinned_bytes": "Enabled tables by the bytes their pins hold back from reclamation.",
}


def _fleet_histograms(measures: list[tuple[float | None, ...]], now: float) -> Iterator[GaugeHistogramMetricFamily]:
    """The fleet-wide gauge histograms of the layout measures (:data:`MEASURES`, in that order)."""
    for i, measure in enumerate(MEASURES):
        name = "oldest_l0_age_seconds" if measure == "oldest_l0_ms" else measure
        values = [float(row[i]) for row in measures if row[i] is not None]  # type: ignore[arg-type]
        if measure == "oldest_l0_ms":  # a commit time (ms) becomes an age (s)
            values = [max(0.0, now - v / 1000) for v in values]
        bounds = FLEET_BUCKETS[name]
        counts = [0] * (len(bounds) + 1)
        for value in values:
            counts[bisect_left(bounds, value)] += 1
        cumulative, running = [], 0
        for bound, count in zip([*(str(float(b)) for b in bounds), "+Inf"], counts, strict=True):
            running += count
            cumulative.append((bound, running))
        yield GaugeHistogramMetricFamily(f"maintd_fleet_{name}", _FLEET_HELP[name], buckets=cumulative,
                                         gsum_value=float(sum(values)))


def _families() -> dict[str, GaugeMetricFamily]:
    def gauge(name: str, documentation: str, labels: list[str]) -> GaugeMetricFamily:
        return GaugeMetricFamily(name, documentation, labels=labels)

    return {
        "maintd_store_up": gauge("maintd_store_up", "Whether the state store answered this scrape.", []),
        "maintd_tables": gauge("maintd_tables", "Registered tables, by state (from the state store).", ["state"]),
        "maintd_leases_held": gauge(
            "maintd_leases_held", "Table leases held, by holder (from the state store).", ["holder"]
        ),
        "maintd_table_healthy": gauge(
            "maintd_table_healthy", "1 unless the table's last runs failed (maintd status names the error).", ["table"]
        ),
        "maintd_table_failures": gauge(
            "maintd_table_failures", "Runs of the table that failed in a row, by kind (0: its last run did not fail).",
            ["table", "kind"]
        ),
        "maintd_root_healthy": gauge(
            "maintd_root_healthy", "1 when the last search of a warehouse root succeeded, 0 when it failed.", ["root"]
        ),
        "maintd_root_tables": gauge(
            "maintd_root_tables", "Tables the last search of a warehouse root found.", ["root"]
        ),
        "maintd_table_files": gauge(
            "maintd_table_files", "Live data files of a table, by level (its last maintenance run).", ["table", "level"]
        ),
        "maintd_table_bytes": gauge(
            "maintd_table_bytes", "Live data bytes of a table, by level (its last maintenance run).", ["table", "level"]
        ),
        "maintd_backlog_files": gauge(
            "maintd_backlog_files", "Files the planner would rewrite (at the last maintenance run).", ["table"]
        ),
        "maintd_backlog_bytes": gauge(
            "maintd_backlog_bytes", "Bytes the planner would rewrite (at the last maintenance run).", ["table"]
        ),
        "maintd_table_pins": gauge(
            "maintd_table_pins", "Live pins of a table (at its last maintenance run).", ["table"]
        ),
        "maintd_table_pinned_bytes": gauge(
            "maintd_table_pinned_bytes",
            "Bytes of data files reclamation would delete but for the table's pins (at its last maintenance run).",
            ["table"],
        ),
        "maintd_table_read_amplification": gauge(
            "maintd_table_read_amplification",
            "Files a reader of the table's fullest bucket opens (at its last maintenance run or check).", ["table"],
        ),
        "maintd_table_oldest_l0_age_seconds": gauge(
            "maintd_table_oldest_l0_age_seconds",
            "Age of the table's oldest level-0 file, waiting for clustering (absent while level 0 is empty).",
            ["table"],
        ),
        "maintd_table_history_bytes": gauge(
            "maintd_table_history_bytes", "Bytes of files removed from the table but kept for older versions.",
            ["table"],
        ),
        "maintd_tables_missing_target": gauge(
            "maintd_tables_missing_target",
            "Tables whose measured figure misses their target, by target (tables with targets only).", ["target"],
        ),
        "maintd_table_target": gauge(
            "maintd_table_target", "A table's declared target (a ceiling), by target.", ["table", "target"]
        ),
        "maintd_table_target_measured": gauge(
            "maintd_table_target_measured",
            "A table's measured figure for a target (p95 over tuning.window_hours; write amplification over "
            "tuning.learn_hours).", ["table", "target"],
        ),
        "maintd_table_target_gap_ratio": gauge(
            "maintd_table_target_gap_ratio",
            "measured / target - 1 of a table's target: above 0 the target is missed by that share.",
            ["table", "target"],
        ),
        "maintd_table_retune_timestamp_seconds": gauge(
            "maintd_table_retune_timestamp_seconds", "Unix time a table was last re-tuned to its targets.", ["table"]
        ),
        "maintd_table_retune_failing": gauge(
            "maintd_table_retune_failing", "1 when a table's last re-tune to its targets failed.", ["table"]
        ),
        "maintd_last_success_timestamp_seconds": gauge(
            "maintd_last_success_timestamp_seconds",
            "Unix time of the last successful run of a table, by kind (from the state store).",
            ["table", "kind"],
        ),
    }


def table_state(record: TableRecord) -> str:
    """``disabled``, ``failing`` (failures in a row) or ``healthy``."""
    return "disabled" if not record.enabled else "failing" if record.consecutive_failures else "healthy"


def _add_table(families: dict[str, GaugeMetricFamily], record: TableRecord, now: float) -> None:
    families["maintd_table_healthy"].add_metric([record.uri], 0 if record.consecutive_failures else 1)
    for kind in RunKind:
        families["maintd_table_failures"].add_metric([record.uri, kind.value], record.failures(kind))
        moment = record.succeeded_at(kind)
        if moment is not None:
            families["maintd_last_success_timestamp_seconds"].add_metric([record.uri, kind.value], moment.timestamp())
    layout: dict[str, Any] = record.layout or {}
    for level, counts in sorted((layout.get("levels") or {}).items()):
        families["maintd_table_files"].add_metric([record.uri, level], counts.get("files", 0))
        families["maintd_table_bytes"].add_metric([record.uri, level], counts.get("bytes", 0))
    if layout.get("pins") is not None:
        families["maintd_table_pins"].add_metric([record.uri], layout["pins"])
        families["maintd_table_pinned_bytes"].add_metric([record.uri], layout.get("pinned_bytes") or 0)
    if layout.get("read_amplification") is not None:
        families["maintd_table_read_amplification"].add_metric([record.uri], layout["read_amplification"])
    if layout.get("oldest_l0_ms") is not None:
        age = max(0.0, now - layout["oldest_l0_ms"] / 1000)
        families["maintd_table_oldest_l0_age_seconds"].add_metric([record.uri], age)
    if layout.get("history_bytes") is not None:
        families["maintd_table_history_bytes"].add_metric([record.uri], layout["history_bytes"])
    if layout.get("backlog_files") is not None:
        families["maintd_backlog_files"].add_metric([record.uri], layout["backlog_files"])
        families["maintd_backlog_bytes"].add_metric([record.uri], layout["backlog_bytes"] or 0)


def _add_targets(families: dict[str, GaugeMetricFamily], record: TuningRecord) -> None:
    for name, value in record.targets.items():
        families["maintd_table_target"].add_metric([record.uri, name], value)
    for name, value in record.measured.items():
        families["maintd_table_target_measured"].add_metric([record.uri, name], value)
    for name, value in record.gaps.items():
        families["maintd_table_target_gap_ratio"].add_metric([record.uri, name], value)
    if record.tuned_at is not None:
        families["maintd_table_retune_timestamp_seconds"].add_metric([record.uri], record.tuned_at.timestamp())
    families["maintd_table_retune_failing"].add_metric([record.uri], 1 if record.error else 0)


__all__ = ["FLEET_BUCKETS", "StoreGauges", "table_state"]
