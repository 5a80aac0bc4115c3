"""The daemon's maintenance budget: built from the ``budget`` settings, installed as the request gate of this
process, served in ``/metrics``, and the order in which tables are served while it binds.

The budget itself (token buckets, admission of packs) is :mod:`maintd.execution.budget`; this module puts it in
the daemon. While the budget binds (runs wait for it), the daemon starts queued tables unhealthiest first
(:func:`unhealthiest_first`, by :func:`~maintd.planner.health.distance_from_targets` of the layout measures the
store keeps): with more work than the budget allows, the tables furthest from their targets get it first.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any, TypeVar

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from maintd.execution.budget import KINDS, Budget
from maintd.planner.health import distance_from_targets
from maintd.settings import Settings
from maintd.storage.requests import install_request_gate

T = TypeVar("T")


def budget_of(settings: Settings) -> Budget | None:
    """The budget the settings ask for, installed as this process's request gate; None when nothing is limited."""
    limits = settings.budget.limits()
    if not limits:
        return None
    budget = Budget(limits)
    if "requests" in limits:
        install_request_gate(budget)
    return budget


def release(budget: Budget | None) -> None:
    """Remove ``budget`` from the request gate (the daemon stopped)."""
    if budget is not None:
        previous = install_request_gate(None)
        if previous is not None and previous is not budget:
            install_request_gate(previous)


def unhealthiest_first(entries: Sequence[tuple[T, str]], layouts: Mapping[str, Mapping[str, Any]],
                       now: datetime, targets: Mapping[str, Any] | None = None) -> list[tuple[T, str]]:
    """``entries`` (anything, table URI) with the tables furthest from their targets first; ties keep their order
    (oldest first). ``layouts``: each table's layout measures; ``targets``: each table's targets (None: none)."""
    def distance(uri: str) -> float:
        return distance_from_targets(layouts.get(uri, {}), (targets or {}).get(uri), now)

    scores = {uri: distance(uri) for _, uri in entries}
    return sorted(entries, key=lambda e: -scores[e[1]])


class BudgetMetrics(Collector):
    """The budget's series, read at every scrape: tokens, limits, admitted totals, waits and time throttled."""

    def __init__(self, budget: Budget) -> None:
        self.budget = budget

    def describe(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        return self._families()

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        return self._families()

    def _families(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        b = self.budget
        tokens = GaugeMetricFamily("maintd_budget_tokens", "Tokens the budget holds now, by kind (bytes or "
                                   "requests; negative: in debt after a unit larger than a burst).", labels=["kind"])
        limit = GaugeMetricFamily("maintd_budget_limit_per_second", "The budget's rate, by kind (bytes or requests "
                                  "per second).", labels=["kind"])
        burst = GaugeMetricFamily("maintd_budget_burst", "The budget's burst, by kind.", labels=["kind"])
        for kind, value in b.tokens().items():
            tokens.add_metric([kind], value)
        for kind, (rate, size) in b.limits().items():
            limit.add_metric([kind], rate)
            burst.add_metric([kind], size)
        admitted = CounterMetricFamily("maintd_budget_admitted", "Bytes or requests the budget admitted, by kind "
                                       "(settled with what units reported); rate() is what maintenance moves per "
                                       "second.", labels=["kind"])
        waits = CounterMetricFamily("maintd_budget_waits", "Packs and requests that had to wait for the budget, by "
                                    "the kind they waited for.", labels=["kind"])
        throttled = CounterMetricFamily("maintd_budget_throttled_seconds", "Seconds packs and requests waited for "
                                        "the budget, by the kind they waited for.", labels=["kind"])
        for kind in KINDS:
            stats = b.stats[kind]
            admitted.add_metric([kind], stats.admitted)
            waits.add_metric([kind], stats.waits)
            throttled.add_metric([kind], stats.throttled_seconds)
        binding = GaugeMetricFamily("maintd_budget_binding", "1 while runs wait for the budget (or did within the "
                                    "last minute): tables are then served unhealthiest first.")
        binding.add_metric([], 1.0 if b.binding() else 0.0)
        yield from (tokens, limit, burst, admitted, waits, throttled, binding)


__all__ = ["BudgetMetrics", "budget_of", "release", "unhealthiest_first"]
