"""Tuning on hand-made patterns: targets the default misses are met, the cheaper policy wins, the binding target
is named, and the search is deterministic and bounded."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from maintd.planner import Policy, default_policy, with_overrides
from maintd.planner.policy_files import validate_policy
from maintd.planner.targets import Targets
from maintd.simulate import Schedule, search
from maintd.simulate.measure import measure
from maintd.simulate.report import DAY_MS
from maintd.simulate.simulator import Learned
from maintd.simulate.tune import TuneResult, tune

from .test_simulate_engine import SIZES, _pattern, _start

DEFAULT = default_policy()
SMALL_KNOBS = (
    (("compaction", "max_delta_files"), (4.0, 16.0, 64.0)),
    (("clustering", "level1", "min_files"), (2.0, 4.0, 8.0)),
    (("clustering", "level1", "max_age_hours"), (0.25, 1.0, 4.0)),
)
"""A small grid over the knobs that matter most for small files: the properties do not depend on its size."""


@pytest.fixture(autouse=True)  # the same grid for every example of a property test too

def _small_grid(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(search, "KNOBS", SMALL_KNOBS)
    monkeypatch.setattr(search, "INTERVALS", (900.0, 3600.0))


def _learned() -> Learned:
    """Four buckets written every five minutes for an hour, replayed: small files pile up fast."""
    return Learned(_pattern(list(range(0, 60, 5)), buckets=4), SIZES, _start(buckets=4))


def _tune(targets: Targets, current: Policy = DEFAULT, **kw: Any) -> TuneResult:
    kw.setdefault("days", 1)
    return tune(_learned(), targets, current, interval_seconds=900, **kw)


def test_the_tuner_meets_targets_the_default_misses_and_its_prediction_holds_when_simulated_again() -> None:
    targets = Targets(read_files_per_bucket=8, merge_delay_minutes=40)
    r = _tune(targets)
    assert r.complete and targets.missed(r.current_predicted)
    assert r.meets and not targets.missed(r.predicted)
    learned = _learned()
    again = measure(learned, r.policy, Schedule(r.interval_seconds, 21600),
                    start_ms=learned.pattern.end_ms, end_ms=learned.pattern.end_ms + DAY_MS)
    assert again.as_dict() == r.predicted
    assert r.overrides and validate_policy(r.policy.model_dump(), where="t") == r.policy


def test_of_two_policies_that_both_meet_the_cheaper_one_is_chosen() -> None:
    eager = with_overrides(DEFAULT, {"clustering": {"level1": {"min_files": 2, "max_age_hours": 0.25}},
                                     "compaction": {"max_delta_files": 4}})
    targets = Targets(read_files_per_bucket=30)
    learned = _learned()
    end = learned.pattern.end_ms + DAY_MS
    sched = Schedule(900, 21600)
    costs = {name: measure(learned, p, sched, start_ms=learned.pattern.end_ms, end_ms=end)
             for name, p in (("eager", eager), ("default", DEFAULT))}
    assert all(not targets.missed(m.as_dict()) for m in costs.values())
    r = _tune(targets, current=eager)
    assert r.meets
    assert r.predicted["bytes_rewritten"] < costs["eager"].bytes_rewritten


def test_impossible_targets_are_reported_with_the_target_that_binds() -> None:
    r = _tune(Targets(read_files_per_bucket=1, merge_delay_minutes=0.01, write_amplification=1))
    assert r.complete and not r.meets
    assert "read_files_per_bucket" in r.binding and "no policy" in r.reason


def test_the_search_is_deterministic_with_one_worker_or_several() -> None:
    targets = Targets(read_files_per_bucket=8)
    a, b, c = _tune(targets), _tune(targets), _tune(targets, workers=2)
    assert a.complete and c.complete
    assert (a.policy, a.interval_seconds, a.curve, a.reason, a.evaluated) == (
        b.policy, b.interval_seconds, b.curve, b.reason, b.evaluated) == (
        c.policy, c.interval_seconds, c.curve, c.reason, c.evaluated)


def test_the_curve_shows_each_figure_once() -> None:
    r = _tune(Targets(read_files_per_bucket=8), days=2, coarse_days=1)
    figures = [p[:3] for p in r.curve]
    assert len(figures) == len(set(figures)) and any(p[3] in ("tuned", "current = tuned") for p in r.curve)


def test_a_search_the_budget_cut_says_so_and_never_that_no_policy_meets() -> None:
    ticks: Iterator[float] = iter(range(10_000))
    targets = Targets(read_files_per_bucket=1, merge_delay_minutes=0.01)
    full = _tune(targets)
    r = _tune(targets, time_budget_s=3, clock=lambda: float(next(ticks)))
    assert full.complete and not r.complete and r.evaluated < full.evaluated
    assert not r.meets and r.binding == ()
    assert "no policy" not in r.reason and "time budget ended the search" in r.reason
    assert "--time-budget" in r.reason and "read_files_per_bucket" in r.reason


@pytest.mark.slow
@settings(max_examples=4, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(read=st.sampled_from([3.0, 8.0, 20.0]), delay=st.sampled_from([20.0, 90.0, None]))
def test_the_chosen_policy_is_valid_and_meets_its_targets_when_it_says_so(read: float, delay: float | None) -> None:
    targets = Targets(read_files_per_bucket=read, merge_delay_minutes=delay)
    r = _tune(targets, time_budget_s=20)
    assert validate_policy(r.policy.model_dump(), where="t") == r.policy
    if r.meets:
        assert not targets.missed(r.predicted)
    else:
        assert r.binding or not r.complete
