"""The Prometheus metrics of the daemon, in a registry of their own.

A dedicated :class:`~prometheus_client.CollectorRegistry` (not the global one) keeps tests independent
and lets one process host several daemons in tests. Per-table series carry a ``table`` label; when a
table is no longer maintained :meth:`Metrics.forget_table` removes its series, so that a warehouse whose
tables come and go does not grow the exposition without bound.

Names follow Prometheus conventions: ``_total`` for counters, base units (bytes, seconds).

The gauges of tables (layout, backlog, last success), table states and leases are not kept here: they
are read from the state store at every scrape (:mod:`maintd.service.store_metrics`, attached with
:meth:`Metrics.attach_store`), so that every replica serves the same values. Counters and histograms
count what this replica did.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import generate_latest

if TYPE_CHECKING:
    from maintd.service.store import StateStore

#: Run and commit durations range from sub-second no-ops to hour-long rewrites.
DURATION_BUCKETS = (0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, float("inf"))


class Metrics:
    """Every metric maintd exports. Methods are thread-safe (prometheus_client locks per series)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry(auto_describe=True)
        r = self.registry
        self._store_attached = False
        self.runs = Counter("maintd_runs", "Finished runs, by kind and status.", ["kind", "status"], registry=r)
        self.failures = Counter(
            "maintd_run_failures", "Failed runs, by kind and error type.", ["kind", "error"], registry=r
        )
        self.run_duration = Histogram(
            "maintd_run_duration_seconds", "Duration of runs, by kind.", ["kind"], buckets=DURATION_BUCKETS, registry=r
        )
        self.bytes_rewritten = Counter(
            "maintd_bytes_rewritten", "Bytes written by compaction and clustering.", ["table"], registry=r
        )
        self.commits = Counter("maintd_commits", "Commits that landed, by operation.", ["operation"], registry=r)
        self.commit_retries = Counter(
            "maintd_commit_retries", "Commit attempts that lost the race and retried.", ["operation"], registry=r
        )
        self.commit_conflicts = Counter(
            "maintd_commit_conflicts", "Commits that hit a conflict, by conflict type.", ["type"], registry=r
        )
        self.commit_duration = Histogram(
            "maintd_commit_duration_seconds",
            "Duration of commits, retries included.",
            ["operation"],
            buckets=DURATION_BUCKETS,
            registry=r,
        )
        self.files_reclaimed = Counter(
            "maintd_files_reclaimed", "Files deleted by reclamation, by reason.", ["table", "reason"], registry=r
        )
        self.bytes_reclaimed = Counter("maintd_bytes_reclaimed", "Bytes deleted by reclamation.", ["table"], registry=r)
        self.in_flight = Gauge("maintd_runs_in_flight", "Runs executing now, by kind.", ["kind"], registry=r)

    def attach_store(self, store: StateStore) -> None:
        """Serve the gauges whose source is ``store`` (tables, layouts, backlog, last success, leases); once."""
        from maintd.service.store_metrics import StoreGauges

        if self._store_attached:
            return
        self.registry.register(StoreGauges(store.list_tables, store.lease_holders, store.list_roots))
        self._store_attached = True

    def expose(self) -> bytes:
        """The Prometheus text exposition of every metric."""
        return generate_latest(self.registry)

    def observe_run(self, kind: str, status: str, duration_seconds: float, *, error: str | None = None) -> None:
        """Count a finished run and its duration; ``error`` is the exception class name of a failure."""
        self.runs.labels(kind=kind, status=status).inc()
        self.run_duration.labels(kind=kind).observe(duration_seconds)
        if error is not None:
            self.failures.labels(kind=kind, error=error).inc()

    def forget_table(self, table: str) -> None:
        """Drop every series of a table that is no longer maintained."""
        for metric in (self.bytes_rewritten, self.files_reclaimed, self.bytes_reclaimed):
            for labels in _label_sets(metric):
                if labels.get("table") == table:
                    metric.remove(*labels.values())


def _label_sets(metric: Counter) -> list[dict[str, str]]:
    names = metric._labelnames
    found = []
    for family in metric.collect():
        for sample in family.samples:
            labels = {name: sample.labels[name] for name in names if name in sample.labels}
            if len(labels) == len(names) and labels not in found:
                found.append(labels)
    return found


__all__ = ["DURATION_BUCKETS", "Metrics"]
