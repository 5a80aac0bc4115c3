"""The Prometheus metrics of the daemon, in a registry of their own.

A dedicated :class:`~prometheus_client.CollectorRegistry` (not the global one) keeps tests independent
and lets one process host several daemons in tests.

Fleet-wide series are always served: counters of runs, checks, commits, rewritten and reclaimed bytes,
and histograms of run, commit, check and pass durations, none with a ``table`` label, so ``/metrics``
stays the same size whatever the number of tables. Per-table series (the ``table`` label) are optional:
served for every table while at most ``metrics.table_series_max_tables`` tables are registered, and
above that only the table gauges of the ``metrics.unhealthiest_tables`` unhealthiest tables (see
:mod:`maintd.service.store_metrics`), without per-table counters. When a table is no longer maintained
:meth:`Metrics.forget_table` removes its series, so that a warehouse whose tables come and go does not
grow the exposition without bound.

Names follow Prometheus conventions: ``_total`` for counters, base units (bytes, seconds).

The gauges of tables (layout, backlog, last success), table states and leases are not kept here: they
are read from the state store at every scrape (:mod:`maintd.service.store_metrics`, attached with
:meth:`Metrics.attach_store`), so that every replica serves the same values. Counters and histograms
count what this replica did.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from maintd.execution.budget import Budget
    from maintd.service.store import StateStore
    from maintd.settings import MetricsSettings

#: Run and commit durations range from sub-second no-ops to hour-long rewrites.
DURATION_BUCKETS = (0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, float("inf"))
#: A check is one look at a table's log: tens of microseconds on a local disk, tens of milliseconds on an
#: object store; a check that plans takes milliseconds to seconds.
CHECK_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5, float("inf"))
#: A pass checks every table this replica owns: from milliseconds to minutes for 10,000 tables.
PASS_BUCKETS = (0.01, 0.05, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, float("inf"))


class Metrics:
    """Every metric maintd exports. Methods are thread-safe (prometheus_client locks per series)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry(auto_describe=True)
        r = self.registry
        self._store_attached = False
        self._probes_attached = False
        self._budget_attached = False
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
        self.fleet_bytes_rewritten = Counter(
            "maintd_fleet_bytes_rewritten", "Bytes written by compaction and clustering, all tables.", registry=r
        )
        self.fleet_files_reclaimed = Counter(
            "maintd_fleet_files_reclaimed", "Files deleted by reclamation, all tables, by reason.", ["reason"],
            registry=r,
        )
        self.fleet_bytes_reclaimed = Counter(
            "maintd_fleet_bytes_reclaimed", "Bytes deleted by reclamation, all tables.", registry=r
        )
        self.checks = Counter(
            "maintd_checks", "Checks of tables by this replica, by outcome (unchanged, planned).", ["outcome"],
            registry=r,
        )
        self.check_duration = Histogram(
            "maintd_check_duration_seconds", "Duration of the look at a table's log that decides whether to plan it.",
            buckets=CHECK_BUCKETS, registry=r,
        )
        self.pass_duration = Histogram(
            "maintd_pass_duration_seconds", "Duration of a pass over this replica's tables, by kind.", ["kind"],
            buckets=PASS_BUCKETS, registry=r,
        )
        self.pass_tables = Gauge(
            "maintd_pass_tables", "Tables the last pass of a kind checked, and of those found unchanged.",
            ["kind", "outcome"], registry=r,
        )
        self.replicas = Gauge("maintd_replicas_live", "Live replicas sharing the tables, as this one sees them.",
                              registry=r)
        self.per_table = True
        self.table_series_max_tables: int | None = None

    def attach_store(self, store: StateStore, settings: MetricsSettings | None = None) -> None:
        """Serve the gauges whose source is ``store`` (tables, layouts, backlog, last success, leases); once.

        ``settings`` bounds the per-table series (None: every table's, as for a few tables)."""
        from maintd.service.store_metrics import StoreGauges

        if self._store_attached:
            return
        if settings is not None:
            self.table_series_max_tables = settings.table_series_max_tables
        self.registry.register(StoreGauges(store, settings))
        self._store_attached = True

    def attach_probes(self, probes: Mapping[str, Callable[[], Mapping[str, str]]],
                      names: Mapping[str, Iterable[str]]) -> None:
        """Serve ``maintd_probe_check_ok{probe, check}``: 1 while a check of a probe passes, 0 while it fails.
        Checks run at every scrape (``probes``: probe name to a function returning the failing checks; ``names``:
        every check of each probe), so that alerts see the Spark driver or the store down as ``/readyz`` and
        ``/healthz`` do."""
        if self._probes_attached:
            return
        self.registry.register(_ProbeChecks(probes, names))
        self._probes_attached = True

    def attach_budget(self, budget: Budget) -> None:
        """Serve the series of the daemon's budget (:class:`~maintd.service.budget.BudgetMetrics`); once."""
        from maintd.service.budget import BudgetMetrics

        if not self._budget_attached:
            self.registry.register(BudgetMetrics(budget))
            self._budget_attached = True

    def set_table_count(self, tables: int) -> None:
        """The enabled tables now: per-table counters are kept only while within ``table_series_max_tables``."""
        limit = self.table_series_max_tables
        per_table = limit is None or tables <= limit
        if self.per_table and not per_table:
            for metric in (self.bytes_rewritten, self.files_reclaimed, self.bytes_reclaimed):
                metric.clear()
        self.per_table = per_table

    def set_replicas(self, live: int) -> None:
        self.replicas.set(live)

    def observe_check(self, seconds: float, outcome: str) -> None:
        """One check of a table: its duration and whether it went on to plan."""
        self.check_duration.observe(seconds)
        self.checks.labels(outcome=outcome).inc()

    def observe_pass(self, kind: str, seconds: float, *, checked: int, unchanged: int) -> None:
        """A pass over this replica's tables."""
        self.pass_duration.labels(kind=kind).observe(seconds)
        self.pass_tables.labels(kind=kind, outcome="checked").set(checked)
        self.pass_tables.labels(kind=kind, outcome="unchanged").set(unchanged)

    def count_rewritten(self, table: str, size: int) -> None:
        """Bytes a maintenance run wrote: fleet-wide, and per table while per-table series are on."""
        self.fleet_bytes_rewritten.inc(size)
        if self.per_table:
            self.bytes_rewritten.labels(table=table).inc(size)

    def count_reclaimed(self, table: str, reason: str, files: int, size: int) -> None:
        """Files and bytes a reclamation deleted for ``reason``: fleet-wide, and per table while on."""
        if files:
            self.fleet_files_reclaimed.labels(reason=reason).inc(files)
            if self.per_table:
                self.files_reclaimed.labels(table=table, reason=reason).inc(files)
        if size:
            self.fleet_bytes_reclaimed.inc(size)
            if self.per_table:
                self.bytes_reclaimed.labels(table=table).inc(size)

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


class _ProbeChecks(Collector):
    """``maintd_probe_check_ok``, computed at every scrape (see :meth:`Metrics.attach_probes`)."""

    def __init__(self, probes: Mapping[str, Callable[[], Mapping[str, str]]],
                 names: Mapping[str, Iterable[str]]) -> None:
        self._probes = dict(probes)
        self._names = {probe: sorted(checks) for probe, checks in names.items()}

    def describe(self) -> Iterator[GaugeMetricFamily]:
        yield self._family()

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = self._family()
        for probe, failing in self._probes.items():
            down = failing()
            for check in self._names.get(probe, []):
                family.add_metric([probe, check], 0 if check in down else 1)
        yield family

    @staticmethod
    def _family() -> GaugeMetricFamily:
        return GaugeMetricFamily("maintd_probe_check_ok", "1 while a check of /readyz (probe=readiness) or /healthz "
                                 "(probe=liveness) passes, else 0 (state_store, spark, warehouse, spark_driver).",
                                 labels=["probe", "check"])


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
