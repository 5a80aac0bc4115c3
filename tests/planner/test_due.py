"""The time triggers of a plan that found nothing: before the moment ``next_time_trigger`` names, the plan of
the same snapshot stays empty; a bucket without DeltaFiles has none."""

from __future__ import annotations

from datetime import timedelta

from hypothesis import given, settings
from hypothesis import strategies as st
from planner_helpers import NOW, base, delta, policy, snapshot

from maintd.planner import next_time_trigger, plan

files_of_a_bucket = st.lists(
    st.tuples(st.integers(0, 1), st.floats(0.0, 40.0), st.integers(1, 8)), min_size=0, max_size=6
)


@settings(max_examples=150, deadline=None)
@given(
    buckets=st.lists(files_of_a_bucket, min_size=1, max_size=3),
    with_base=st.booleans(),
    compacted_h=st.floats(0.0, 30.0),
    retain=st.sampled_from([1, 6, 24, 72]),
    steps=st.lists(st.floats(0.0, 1.0), min_size=1, max_size=8),
)
def test_a_plan_that_found_nothing_stays_empty_until_the_next_time_trigger(
    buckets: list[list[tuple[int, float, int]]], with_base: bool, compacted_h: float, retain: int,
    steps: list[float],
) -> None:
    files = []
    version = 1
    for b, spec in enumerate(buckets):
        if with_base:
            files.append(base(0, bucket=b, compacted_h=compacted_h, size=64 * 1024 * 1024))
        for level, age, size_kib in spec:
            files.append(delta(version, level=level, bucket=b, age_h=age, size=size_kib * 1024))
            version += 1
    snap = snapshot(files, version=version, retain_hours=retain)
    pol = policy()
    if plan(snap, pol, NOW).tasks:
        return  # only a plan that found nothing is skipped until its trigger
    due = next_time_trigger(snap, pol, NOW)
    horizon = due if due is not None else NOW + timedelta(days=30)
    for step in steps:
        moment = NOW + (horizon - NOW) * step
        if moment < horizon:
            assert not plan(snap, pol, moment).tasks, f"a task at {moment} before the trigger {due}"
    if due is not None:
        assert due > NOW


def test_a_table_without_delta_files_has_no_time_trigger() -> None:
    snap = snapshot([base(10, bucket=0), base(10, bucket=1)], version=10)
    assert next_time_trigger(snap, policy(), NOW) is None


def test_the_age_of_a_run_of_delta_files_is_a_trigger() -> None:
    snap = snapshot([delta(1, age_h=0.5), delta(2, age_h=0.25)], version=2)
    pol = policy()
    assert not plan(snap, pol, NOW).tasks
    due = next_time_trigger(snap, pol, NOW)
    assert due is not None and due <= NOW + timedelta(hours=0.75) + timedelta(milliseconds=1)
    assert plan(snap, pol, NOW + timedelta(hours=0.76)).tasks


def test_a_single_file_per_level_waits_for_compaction_not_for_the_age_of_a_merge() -> None:
    """One DeltaFile per bucket cannot be merged whatever its age: the next trigger is compaction's interval."""
    snap = snapshot([delta(1, age_h=0.1, bucket=0), delta(2, age_h=0.1, bucket=1)], version=2)
    due = next_time_trigger(snap, policy(), NOW)
    assert due is not None and due >= NOW + timedelta(hours=23.8), due
