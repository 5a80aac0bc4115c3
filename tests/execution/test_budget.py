"""The maintenance budget: token buckets on a fake clock, the line of waiting packs, and runs in process and on
Spark released within the budget (admission times measured against rate and burst)."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from maintd.execution import ExecutionOptions, run_plan, task_specs
from maintd.execution.budget import Budget, Cost, TokenBucket, unit_cost
from maintd.execution.scheduler import LocalBackend

from .helpers import make_table, plan_all, sorted_read


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_a_bucket_starts_full_refills_at_its_rate_and_holds_no_more_than_its_burst() -> None:
    clock = FakeClock()
    bucket = TokenBucket(rate=100, burst=300, clock=clock)
    assert bucket.available() == 300
    bucket.take(250)
    assert bucket.wait_for(200) == pytest.approx(1.5)
    clock.now += 1
    assert bucket.available() == pytest.approx(150)
    clock.now += 60
    assert bucket.available() == 300


def test_a_take_larger_than_the_burst_waits_for_a_full_bucket_and_leaves_a_debt() -> None:
    clock = FakeClock()
    bucket = TokenBucket(rate=100, burst=300, clock=clock)
    bucket.take(100)
    assert bucket.wait_for(1000) == pytest.approx(1.0)  # a full bucket, not 1000 tokens
    clock.now += 1
    bucket.take(1000)
    assert bucket.available() == pytest.approx(-700)
    assert bucket.wait_for(100) == pytest.approx(8.0)


def test_a_bucket_needs_a_positive_rate_and_burst() -> None:
    with pytest.raises(ValueError, match="positive rate and burst"):
        TokenBucket(rate=0, burst=10)


def test_the_unhealthiest_waiting_run_is_admitted_first_and_a_small_pack_does_not_jump_a_large_one() -> None:
    clock = FakeClock()
    budget = Budget({"read_bytes": (100.0, 100.0)}, clock=clock)
    first = budget.ticket(Cost(read_bytes=100))
    assert budget.try_admit(first) == 0.0
    healthy_small = budget.ticket(Cost(read_bytes=10), priority=0.5)
    sick_large = budget.ticket(Cost(read_bytes=100), priority=3.0)
    assert budget.try_admit(healthy_small) > 0  # tokens would do, but a sicker table waits ahead
    assert budget.try_admit(sick_large) == pytest.approx(1.0)
    assert budget.binding()
    clock.now += 1
    assert budget.try_admit(healthy_small) > 0
    assert budget.try_admit(sick_large) == 0.0
    clock.now += 0.1
    assert budget.try_admit(healthy_small) == 0.0
    assert budget.stats["read_bytes"].waits == 2
    assert budget.stats["read_bytes"].throttled_seconds == pytest.approx(1.0 + 1.1)


def test_a_withdrawn_ticket_leaves_the_line_and_the_budget_stops_binding_a_minute_later() -> None:
    clock = FakeClock()
    budget = Budget({"requests": (1.0, 1.0)}, clock=clock)
    budget.try_admit(budget.ticket(Cost(requests=1)))
    waiting = budget.ticket(Cost(requests=1))
    other = budget.ticket(Cost(requests=1))
    assert budget.try_admit(other) > 0
    budget.withdraw(waiting)
    clock.now += 1
    assert budget.try_admit(other) == 0.0
    assert budget.binding()
    clock.now += 61
    assert not budget.binding()


def test_settling_charges_what_a_pack_spent_beyond_its_estimate_and_gives_back_the_rest() -> None:
    clock = FakeClock()
    budget = Budget({"write_bytes": (100.0, 1000.0)}, clock=clock)
    budget.try_admit(budget.ticket(Cost(write_bytes=800)))
    budget.settle(Cost(write_bytes=800), Cost(write_bytes=300))
    assert budget.tokens()["write_bytes"] == pytest.approx(700)
    budget.settle(Cost(write_bytes=100), Cost(write_bytes=1500))
    assert budget.tokens()["write_bytes"] == pytest.approx(-700)
    assert budget.stats["write_bytes"].admitted == 800 - 500 + 1400


def test_the_request_gate_waits_for_tokens_on_the_clock_it_is_given() -> None:
    clock = FakeClock()
    budget = Budget({"requests": (10.0, 5.0)}, clock=clock, sleep=clock.sleep)
    start = clock.now
    for _ in range(25):
        budget.acquire_requests()
    assert clock.now - start == pytest.approx(2.0)  # 5 at once, then 10 a second
    assert budget.stats["requests"].admitted == 25
    assert budget.stats["requests"].waits == 20


def test_a_budget_refuses_an_unknown_kind() -> None:
    with pytest.raises(ValueError, match="unknown budget kind"):
        Budget({"bytes": (1.0, 1.0)})


@given(st.lists(st.tuples(st.integers(1, 500), st.floats(0, 3)), min_size=1, max_size=40))
def test_what_is_admitted_in_any_window_is_within_rate_times_window_plus_one_burst(
    steps: list[tuple[int, float]]
) -> None:
    """Invariant: admissions from t_i to t_j total at most rate * (t_j - t_i) + the burst (or the largest
    single admission, when one exceeds the burst)."""
    clock = FakeClock()
    rate, burst = 100.0, 300.0
    budget = Budget({"read_bytes": (rate, burst)}, clock=clock)
    for size, gap in steps:
        clock.now += gap
        ticket = budget.ticket(Cost(read_bytes=size))
        while (wait := budget.try_admit(ticket)) > 0:
            clock.now += wait
    assert_within(list(budget.admissions), rate, max(burst, max(s for s, _ in steps)))


def assert_within(admissions: list[tuple[float, Cost]], rate: float, burst: float) -> None:
    for i, j in itertools.combinations_with_replacement(range(len(admissions)), 2):
        released = sum(c.read_bytes for _, c in admissions[i:j + 1])
        assert released <= rate * (admissions[j][0] - admissions[i][0]) + burst + 1e-6, (i, j)


def _budget_for(table: Any, plan: Any, seconds: float) -> tuple[Budget, float, float, int]:
    """A read budget that lets the plan's units out over about ``seconds``, a burst of its largest unit."""
    units = task_specs(plan, table.snapshot(plan.read_version))
    sizes = [unit_cost(u).read_bytes for u in units]
    burst = float(max(sizes))
    rate = (sum(sizes) - burst) / seconds
    return Budget({"read_bytes": (rate, burst)}), rate, burst, sum(sizes)


def _check_released_within(budget: Budget, rate: float, burst: float, total: int, seconds: float) -> None:
    admissions = list(budget.admissions)
    assert sum(c.read_bytes for _, c in admissions) >= total  # every unit was admitted
    assert_within(admissions, rate, burst)
    assert admissions[-1][0] - admissions[0][0] >= seconds * 0.95  # and the budget did hold them back
    assert budget.stats["read_bytes"].waits >= 1


def test_a_run_in_process_releases_its_units_within_the_budget(tmp_path: Path) -> None:
    table, model = make_table(tmp_path, commits=12, buckets=4, seed=5)
    plan = plan_all(table, "cluster")
    budget, rate, burst, total = _budget_for(table, plan, seconds=1.5)
    report = run_plan(plan, table, None, ExecutionOptions(in_process_threads=2), commit=True,
                      backend=LocalBackend(2), budget=budget)
    assert all(r.ok for r in report.results) and report.spark_tasks == 4  # a pack per unit: each fits a burst
    _check_released_within(budget, rate, burst, total, 1.5)
    assert sorted_read(table).equals(model.table())


@pytest.mark.slow
@pytest.mark.spark
def test_spark_tasks_are_released_within_the_budget(tmp_path: Path, spark: Any) -> None:
    table, model = make_table(tmp_path, commits=12, buckets=4, seed=6)
    plan = plan_all(table, "compact")
    budget, rate, burst, total = _budget_for(table, plan, seconds=1.5)
    report = run_plan(plan, table, spark, ExecutionOptions(), commit=True, budget=budget)
    assert report.engine == "spark" and all(r.ok for r in report.results) and report.spark_tasks == 4
    _check_released_within(budget, rate, burst, total, 1.5)
    assert sorted_read(table).equals(model.table())
