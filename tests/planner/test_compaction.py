"""Compaction triggers at their boundaries, one task per bucket, ranking and the budget cut."""

from __future__ import annotations

from planner_helpers import NOW, MiB, base, delta, policy, snapshot

from maintd.planner import MaintenancePlan, Policy, plan, with_overrides


def _plan(files, pol, **kw):  # type: ignore[no-untyped-def]
    return plan(snapshot(files, **kw), pol, NOW, "file:///t")


def _compacts(p: MaintenancePlan) -> bool:
    return [t.kind for t in p.tasks] == ["compact"]


def test_delta_file_count_triggers_at_exactly_max_delta_files(quiet: Policy) -> None:
    pol = with_overrides(quiet, {"compaction": {"max_delta_files": 4}})
    files = [base(0), *(delta(v, level=2, max_version=v) for v in range(1, 4))]
    assert not _compacts(_plan(files, pol))
    p = _plan([*files, delta(4, level=2)], pol)
    assert _compacts(p)
    t = p.tasks[0]
    assert t.target_level is None and t.input_files == 5 and p.decisions[0].rule == "compaction.max_delta_files"


def test_delta_base_ratio_triggers_at_exactly_the_ratio(quiet: Policy) -> None:
    pol = with_overrides(quiet, {"compaction": {"delta_base_ratio": 0.5}})
    assert _compacts(_plan([base(0, size=100 * MiB), delta(1, level=2, size=50 * MiB)], pol))
    assert not _compacts(_plan([base(0, size=100 * MiB), delta(1, level=2, size=50 * MiB - 1)], pol))


def test_delta_base_ratio_never_divides_by_a_missing_base(quiet: Policy) -> None:
    pol = with_overrides(quiet, {"compaction": {"delta_base_ratio": 0.01}})
    p = _plan([delta(1, size=50 * MiB)], pol)
    assert p.tasks == () and "delta_base_ratio" not in p.decisions[0].message


def test_time_since_last_compaction_triggers_at_max_interval(quiet: Policy) -> None:
    pol = with_overrides(quiet, {"compaction": {"max_interval_hours": 24}})
    assert _compacts(_plan([base(0, compacted_h=24), delta(1)], pol))
    p = _plan([base(0, compacted_h=23.9), delta(1)], pol)
    assert p.tasks == () and "since last compaction < max_interval_hours 24 h" in p.decisions[0].message


def test_never_compacted_bucket_ages_from_its_oldest_delta_and_says_so(quiet: Policy) -> None:
    pol = with_overrides(quiet, {"compaction": {"max_interval_hours": 24}})
    p = _plan([delta(1, age_h=24), delta(2)], pol)
    assert _compacts(p) and p.decisions[0].rule == "compaction.max_interval_hours"
    assert p.tasks[0].reason.endswith("never compacted, oldest DeltaFile 24 h old >= max_interval_hours 24 h")
    young = _plan([delta(1, age_h=23), delta(2)], pol)
    assert not _compacts(young)
    msg = young.decisions[0].message
    assert "never compacted, oldest DeltaFile 23 h old < max_interval_hours 24 h" in msg
    assert "since last compaction" not in msg


def test_a_fresh_bucket_explains_the_interval_by_its_oldest_delta_not_a_past_compaction() -> None:
    p = plan(snapshot([delta(1, age_h=0.5), delta(2, age_h=0.4), delta(3, age_h=0.3)]), policy(), NOW)
    assert p.decisions[0].message.endswith("never compacted, oldest DeltaFile 30 min old < max_interval_hours 24 h")
    with_base = plan(snapshot([base(0, compacted_h=2), delta(1, age_h=0.5)]), policy(), NOW)
    assert with_base.decisions[0].message.endswith("2 h since last compaction < max_interval_hours 24 h")


def test_delete_share_triggers_at_exactly_the_share(quiet: Policy) -> None:
    pol = with_overrides(quiet, {"compaction": {"update_delete_share": 0.3}})
    assert _compacts(_plan([base(0), delta(1, rows=100, deletes=30)], pol))
    assert not _compacts(_plan([base(0), delta(1, rows=100, deletes=29)], pol))


def test_retention_pressure_compacts_deltas_older_than_retain_hours(quiet: Policy) -> None:
    pol = with_overrides(quiet, {"compaction": {"retention_pressure": True}})
    p = _plan([base(0, compacted_h=30), delta(1, age_h=24.01)], pol, retain_hours=24)
    assert _compacts(p) and p.decisions[0].rule == "compaction.retention_pressure"
    assert not _compacts(_plan([base(0, compacted_h=30), delta(1, age_h=24)], pol, retain_hours=24))


def test_retention_pressure_off_ignores_expired_deltas(quiet: Policy) -> None:
    p = _plan([base(0, compacted_h=300), delta(1, age_h=200)], quiet, retain_hours=24)
    assert p.tasks == () and "acid.data.retain.hours" not in p.decisions[0].message


def test_min_interval_holds_back_a_fired_trigger_right_after_compaction(quiet: Policy) -> None:
    pol = with_overrides(quiet, {"compaction": {"max_delta_files": 1, "min_interval_hours": 1}})
    p = _plan([base(0, compacted_h=0.5), delta(1)], pol)
    assert p.tasks == () and p.decisions[0].rule == "compaction.min_interval_hours"
    assert _compacts(_plan([base(0, compacted_h=1), delta(1)], pol))
    assert not _compacts(_plan([base(0, compacted_h=0.99), delta(1)], pol))


def test_min_interval_does_not_hold_back_a_bucket_that_was_never_compacted(quiet: Policy) -> None:
    pol = with_overrides(quiet, {"compaction": {"max_delta_files": 1, "min_interval_hours": 1}})
    p = _plan([delta(1, age_h=0.1)], pol)
    assert _compacts(p) and p.decisions[0].rule == "compaction.max_delta_files"


def test_delete_share_of_one_fires_only_when_every_delta_row_is_a_delete(quiet: Policy) -> None:
    pol = with_overrides(quiet, {"compaction": {"update_delete_share": 1}})
    assert _compacts(_plan([base(0), delta(1, rows=100, deletes=100)], pol))
    assert not _compacts(_plan([base(0), delta(1, rows=100, deletes=99)], pol))


def test_a_base_alone_is_never_compacted(quiet: Policy) -> None:
    knobs = {"max_delta_files": 1, "max_interval_hours": 0.001, "min_interval_hours": 0}
    pol = with_overrides(quiet, {"compaction": knobs})
    p = _plan([base(0, compacted_h=1000)], pol)
    assert p.tasks == () and p.decisions[0].rule == "no_delta_files"


def test_compaction_includes_isolated_files_and_wins_over_clustering(quiet: Policy) -> None:
    pol = with_overrides(quiet, {"compaction": {"max_delta_files": 3}, "clustering": {"level1": {"min_files": 2}}})
    files = [base(0), delta(1, size=300 * MiB), delta(2), delta(3)]
    p = _plan(files, pol)
    assert _compacts(p) and set(p.tasks[0].inputs) == {f.path for f in files}


def test_compaction_estimates_output_without_deleted_rows(quiet: Policy) -> None:
    pol = with_overrides(quiet, {"compaction": {"update_delete_share": 0.5}})
    t = _plan([base(0, size=100 * MiB), delta(1, size=10 * MiB, rows=100, deletes=50)], pol).tasks[0]
    assert t.input_bytes == 110 * MiB and t.expected_output_bytes == 100 * MiB


def test_disabled_compaction_lets_clustering_run(quiet: Policy) -> None:
    pol = with_overrides(quiet, {"compaction": {"enabled": False, "max_delta_files": 1},
                                 "clustering": {"level1": {"min_files": 2}}})
    p = _plan([base(0), delta(1), delta(2)], pol)
    assert [t.kind for t in p.tasks] == ["cluster"]


def test_each_bucket_gets_at_most_one_task(quiet: Policy) -> None:
    pol = with_overrides(quiet, {"clustering": {"level1": {"min_files": 2}, "level2": {"min_files": 2}}})
    files = [delta(1, level=1, max_version=5), delta(6, level=1, max_version=9), delta(10), delta(11)]
    p = _plan(files, pol)
    assert len(p.tasks) == 1 and p.tasks[0].target_level == 1


def _many_buckets(n: int) -> list:  # type: ignore[type-arg]
    return [f for b in range(n) for f in (base(0, bucket=b), delta(1, bucket=b, size=(b + 1) * MiB,
                                                                    rows=100, deletes=50))]


def test_tasks_are_ranked_by_benefit_for_cost(quiet: Policy) -> None:
    pol = with_overrides(quiet, {"compaction": {"update_delete_share": 0.5}})
    p = _plan(_many_buckets(4), pol)
    scores = [t.score for t in p.tasks]
    assert scores == sorted(scores, reverse=True)
    assert [t.bucket for t in p.tasks] == [3, 2, 1, 0]  # most stale bytes per byte rewritten first


def test_the_budget_cuts_tasks_and_defers_the_rest(quiet: Policy) -> None:
    pol = with_overrides(quiet, {"compaction": {"update_delete_share": 0.5}, "budget": {"max_tasks": 2}})
    p = _plan(_many_buckets(4), pol)
    assert len(p.tasks) == 2
    deferred = [d for d in p.decisions if d.action == "deferred"]
    assert [d.rule for d in deferred] == ["budget.max_tasks"] * 2


def test_max_tasks_at_exactly_the_number_of_tasks_defers_nothing(quiet: Policy) -> None:
    pol = with_overrides(quiet, {"compaction": {"update_delete_share": 0.5}, "budget": {"max_tasks": 3}})
    p = _plan(_many_buckets(3), pol)
    assert len(p.tasks) == 3 and not [d for d in p.decisions if d.action == "deferred"]
    one_less = _plan(_many_buckets(3), with_overrides(pol, {"budget": {"max_tasks": 2}}))
    assert len(one_less.tasks) == 2
    assert [(d.bucket, d.rule) for d in one_less.decisions if d.action == "deferred"] == [(0, "budget.max_tasks")]


def _big_middle_small() -> list:  # type: ignore[type-arg]
    """Three compactions ranked 0, 1, 2 of 150, 120 and 21 MiB: the middle one is bigger than the last."""
    return [base(0, bucket=0, size=100 * MiB), delta(1, bucket=0, size=50 * MiB, rows=100, deletes=50),
            base(0, bucket=1, size=100 * MiB), delta(1, bucket=1, size=20 * MiB, rows=100, deletes=50),
            base(0, bucket=2, size=20 * MiB), delta(1, bucket=2, size=1 * MiB, rows=100, deletes=50)]


def test_max_bytes_defers_a_task_that_does_not_fit_and_lets_a_smaller_later_one_through(quiet: Policy) -> None:
    pol = with_overrides(quiet, {"compaction": {"update_delete_share": 0.5}})
    unlimited = _plan(_big_middle_small(), pol)
    assert [(t.bucket, t.input_bytes) for t in unlimited.tasks] == [(0, 150 * MiB), (1, 120 * MiB), (2, 21 * MiB)]
    p = _plan(_big_middle_small(), with_overrides(pol, {"budget": {"max_bytes": 175 * MiB}}))
    assert [t.bucket for t in p.tasks] == [0, 2] and p.input_bytes == 171 * MiB
    d = {x.bucket: x for x in p.decisions}
    assert (d[0].action, d[2].action) == ("compact", "compact")
    assert (d[1].action, d[1].rule) == ("deferred", "budget.max_bytes")
    assert d[1].message == "deferred, 120.0 MiB does not fit the 25.0 MiB left of max_bytes 175.0 MiB"


def test_max_bytes_admits_a_task_that_fills_the_budget_exactly(quiet: Policy) -> None:
    pol = with_overrides(quiet, {"compaction": {"update_delete_share": 0.5}, "budget": {"max_bytes": 171 * MiB}})
    assert [t.bucket for t in _plan(_big_middle_small(), pol).tasks] == [0, 2]
    p = _plan(_big_middle_small(), with_overrides(pol, {"budget": {"max_bytes": 171 * MiB - 1}}))
    assert [t.bucket for t in p.tasks] == [0]
    assert [(d.bucket, d.rule) for d in p.decisions if d.action == "deferred"] == [
        (1, "budget.max_bytes"), (2, "budget.max_bytes")]


def test_an_oversized_task_runs_alone_when_it_ranks_first(quiet: Policy) -> None:
    pol = with_overrides(quiet, {"compaction": {"update_delete_share": 0.5}, "budget": {"max_bytes": 1}})
    p = _plan(_big_middle_small(), pol)
    assert [t.bucket for t in p.tasks] == [0] and p.input_bytes == 150 * MiB
    deferred = [d for d in p.decisions if d.action == "deferred"]
    assert [d.bucket for d in deferred] == [1, 2]
    assert deferred[1].message == "deferred, 21.0 MiB does not fit the 0 B left of max_bytes 1 B"


def test_file_cost_weighs_files_removed_against_bytes_rewritten(quiet: Policy) -> None:
    pol = with_overrides(quiet, {"compaction": {"update_delete_share": 0.5},
                                 "clustering": {"level1": {"min_files": 10}}})
    files = [*(delta(v, bucket=0) for v in range(1, 11)),  # 10 small files: a clustering task removes 9 files
             base(0, bucket=1, size=100 * MiB), delta(1, bucket=1, size=10 * MiB, rows=100, deletes=50)]
    assert [t.kind for t in _plan(files, pol).tasks] == ["cluster", "compact"]
    cheap_files = with_overrides(pol, {"ranking": {"file_cost_bytes": 1}})
    assert [t.kind for t in _plan(files, cheap_files).tasks] == ["compact", "cluster"]


def test_only_buckets_that_hold_files_get_a_decision(quiet: Policy) -> None:
    p = _plan([delta(1, bucket=3), base(0, bucket=7)], quiet)  # the table has 16 buckets
    assert [(d.bucket, d.action, d.rule) for d in p.decisions] == [(3, "skip", "clustering.below_thresholds"),
                                                                    (7, "skip", "no_delta_files")]


def test_older_backlog_ranks_higher_with_age_weight(quiet: Policy) -> None:
    pol = with_overrides(quiet, {"clustering": {"level1": {"min_files": 2}}, "ranking": {"age_weight_per_day": 1}})
    files = [delta(1, bucket=0, age_h=1), delta(2, bucket=0, age_h=1),
             delta(1, bucket=1, age_h=72), delta(2, bucket=1, age_h=72)]
    assert [t.bucket for t in _plan(files, pol).tasks] == [1, 0]


def test_retention_pressure_waits_while_pins_hold_the_history_it_would_free(quiet: Policy) -> None:
    import dataclasses

    from planner_helpers import NOW_MS

    from maintd.table.log.actions import Pin

    pol = with_overrides(quiet, {"compaction": {"retention_pressure": True}})
    files = [base(0, compacted_h=30), delta(1, age_h=30)]
    held = Pin(id="p", version=3, created=NOW_MS - 1000, expires=NOW_MS + 2 * 3_600_000)
    pinned = dataclasses.replace(snapshot(files, retain_hours=24), pins={"p": held})
    p = plan(pinned, pol, NOW, "file:///t")
    assert p.tasks == () and "pins hold the table's history for 2 h more" in p.decisions[0].message
    expired = held.model_copy(update={"expires": NOW_MS})
    assert _compacts(plan(dataclasses.replace(pinned, pins={"p": expired}), pol, NOW, "file:///t")), \
        "an expired pin holds nothing"
