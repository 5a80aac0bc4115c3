"""The Prometheus metrics of the daemon, in a registry of their own.

A dedicated :class:`~prometheus_client.CollectorRegistry` (not the global one) keeps tests independent
and lets one process host several daemons in tests. Per-table series carry a ``table`` label; when a
table is no longer maintained :meth:`Metrics.forget_table` removes its series, so that a warehouse whose
tables come and go does not grow the exposition without bound.

Names follow Prometheus conventions: ``_total`` for counters, base units (bytes, seconds).
"""

from __future__ import annotations

from collections.abc import Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import generate_latest

#: Run and commit durations range from sub-second no-ops to hour-long rewrites.
DURATION_BUCKETS = (0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, float("inf"))


class Metrics:
    """Every metric maintd exports. Methods are thread-safe (prometheus_client locks per series)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry(auto_describe=True)
        r = self.registry
        self.tables = Gauge("maintd_tables", "Tables known to this daemon, by state.", ["state"], registry=r)
        self.files = Gauge(
            "maintd_table_files", "Live data files of a table, by level.", ["table", "level"], registry=r
        )
        self.bytes = Gauge(
            "maintd_table_bytes", "Live data bytes of a table, by level.", ["table", "level"], registry=r
        )
        self.backlog_files = Gauge(
            "maintd_backlog_files", "Files the planner would rewrite now.", ["table"], registry=r
        )
        self.backlog_bytes = Gauge(
            "maintd_backlog_bytes", "Bytes the planner would rewrite now.", ["table"], registry=r
        )
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
        self.leases_held = Gauge(
            "maintd_leases_held", "Table leases held, by holder (as seen in the state store).", ["holder"], registry=r
        )
        self.in_flight = Gauge("maintd_runs_in_flight", "Runs executing now, by kind.", ["kind"], registry=r)
        self.last_success = Gauge(
            "maintd_last_success_timestamp_seconds",
            "Unix time of the last successful run of a table, by kind.",
            ["table", "kind"],
            registry=r,
        )

    def expose(self) -> bytes:
        """The Prometheus text exposition of every metric."""
        return generate_latest(self.registry)

    def observe_run(self, kind: str, status: str, duration_seconds: float, *, error: str | None = None) -> None:
        """Count a finished run and its duration; ``error`` is the exception class name of a failure."""
        self.runs.labels(kind=kind, status=status).inc()
        self.run_duration.labels(kind=kind).observe(duration_seconds)
        if error is not None:
            self.failures.labels(kind=kind, error=error).inc()

    def set_table_layout(
        self,
        table: str,
        files_by_level: Mapping[str, int],
        bytes_by_level: Mapping[str, int],
        *,
        backlog_files: int = 0,
        backlog_bytes: int = 0,
    ) -> None:
        """Publish the current layout (per level) and backlog of a table."""
        for level, count in files_by_level.items():
            self.files.labels(table=table, level=level).set(count)
        for level, size in bytes_by_level.items():
            self.bytes.labels(table=table, level=level).set(size)
        self.backlog_files.labels(table=table).set(backlog_files)
        self.backlog_bytes.labels(table=table).set(backlog_bytes)

    def set_tables(self, counts: Mapping[str, int]) -> None:
        """Publish how many tables are in each state (``healthy``, ``failing``, ``disabled``...)."""
        self.tables.clear()
        for state, count in counts.items():
            self.tables.labels(state=state).set(count)

    def set_lease_holders(self, holders: Mapping[str, str]) -> None:
        """Publish the leases per holder from a table-to-holder map."""
        self.leases_held.clear()
        per_holder: dict[str, int] = {}
        for holder in holders.values():
            per_holder[holder] = per_holder.get(holder, 0) + 1
        for holder, count in per_holder.items():
            self.leases_held.labels(holder=holder).set(count)

    def forget_table(self, table: str) -> None:
        """Drop every series of a table that is no longer maintained."""
        for metric in (
            self.files,
            self.bytes,
            self.backlog_files,
            self.backlog_bytes,
            self.bytes_rewritten,
            self.files_reclaimed,
            self.bytes_reclaimed,
            self.last_success,
        ):
            for labels in _label_sets(metric):
                if labels.get("table") == table:
                    metric.remove(*labels.values())


def _label_sets(metric: Gauge | Counter) -> list[dict[str, str]]:
    names = metric._labelnames
    found = []
    for family in metric.collect():
        for sample in family.samples:
            labels = {name: sample.labels[name] for name in names if name in sample.labels}
            if len(labels) == len(names) and labels not in found:
                found.append(labels)
    return found


__all__ = ["DURATION_BUCKETS", "Metrics"]
