"""Clustering rules, each at the boundary of its threshold."""

from __future__ import annotations

import pytest
from planner_helpers import NOW, MiB, base, delta, policy, snapshot

from maintd.planner import Policy, plan, with_overrides
from maintd.planner.candidates import Candidate, Skip
from maintd.planner.clustering import clustering_candidate, cut_points
from maintd.planner.stats import bucket_stats


def _plan(files, pol):  # type: ignore[no-untyped-def]
    return plan(snapshot(files), pol, NOW, "file:///t")


def _level1(n: int, *, size: int = MiB, age_h: float = 0.1) -> list:  # type: ignore[type-arg]
    """``n`` level-1 files of ``size`` bytes, 10 versions each, the oldest ``age_h`` hours old."""
    return [delta(10 * k + 1, level=1, max_version=10 * k + 10, size=size, age_h=age_h if k == 0 else 0.1)
            for k in range(n)]


def test_level0_files_merge_at_exactly_min_files(quiet: Policy) -> None:
    pol = with_overrides(quiet, {"clustering": {"level1": {"min_files": 5}}})
    p = _plan([delta(v) for v in range(1, 6)], pol)
    assert len(p.tasks) == 1
    t = p.tasks[0]
    assert (t.kind, t.target_level, t.input_files) == ("cluster", 1, 5)
    assert p.decisions[0].rule == "clustering.level1.min_files"


def test_one_file_below_min_files_does_not_merge_and_explains_why(quiet: Policy) -> None:
    pol = with_overrides(quiet, {"clustering": {"level1": {"min_files": 5}}})
    p = _plan([delta(v) for v in range(1, 5)], pol)
    assert p.tasks == ()
    d = p.decisions[0]
    assert d.action == "skip"
    assert "4 level-0 files < min_files 5" in d.message
    assert "oldest" in d.message and "max_age_hours" in d.message


@pytest.mark.parametrize(("n", "merged"), [(4, 0), (5, 5), (6, 6)])
def test_level1_min_files_boundary(quiet: Policy, n: int, merged: int) -> None:
    pol = with_overrides(quiet, {"clustering": {"level1": {"min_files": 5}}})
    p = _plan([delta(v) for v in range(1, n + 1)], pol)
    assert [t.input_files for t in p.tasks] == ([merged] if merged else [])


def test_level0_files_merge_at_exactly_trigger_bytes(quiet: Policy) -> None:
    pol = with_overrides(quiet, {"clustering": {"level1": {"trigger_bytes": 4 * MiB}}})
    assert len(_plan([delta(1, size=2 * MiB), delta(2, size=2 * MiB)], pol).tasks) == 1
    assert _plan([delta(1, size=2 * MiB), delta(2, size=2 * MiB - 1)], pol).tasks == ()


def test_a_quiet_bucket_merges_once_its_oldest_file_reaches_max_age(quiet: Policy) -> None:
    pol = with_overrides(quiet, {"clustering": {"level1": {"max_age_hours": 6}}})
    assert _plan([delta(1, age_h=5.99), delta(2, age_h=1)], pol).tasks == ()
    p = _plan([delta(1, age_h=6), delta(2, age_h=1)], pol)
    assert p.tasks[0].reason.endswith("oldest 6 h >= max_age_hours 6 h")


def test_a_single_old_file_is_never_merged_alone(quiet: Policy) -> None:
    pol = with_overrides(quiet, {"clustering": {"level1": {"max_age_hours": 1}}})
    assert _plan([delta(1, age_h=100)], pol).tasks == ()


def test_a_file_above_isolation_size_never_enters_a_merge(quiet: Policy) -> None:
    pol = with_overrides(quiet, {"clustering": {"isolation_bytes": 10 * MiB,
                                                "level1": {"min_files": 3, "target_bytes": 10 * MiB},
                                                "level2": {"target_bytes": 10 * MiB}}})
    files = [delta(1), delta(2, size=10 * MiB + 1), delta(3), delta(4)]
    p = _plan(files, pol)
    assert p.tasks == ()  # the isolated file splits the run into 1 + 2 files
    at_limit = _plan([delta(1), delta(2, size=10 * MiB), delta(3)], pol)
    assert delta(2, size=10 * MiB).path in at_limit.tasks[0].inputs  # exactly isolation_bytes is not above it
    big = _plan([delta(1), delta(2, size=10 * MiB + 1), delta(3), delta(4), delta(5)], pol)
    assert big.tasks[0].inputs == tuple(f.path for f in [delta(3), delta(4), delta(5)])


def test_a_merge_never_spans_more_than_max_time_span(quiet: Policy) -> None:
    pol = with_overrides(quiet, {"clustering": {"max_time_span_hours": 2, "level1": {"min_files": 2}}})
    exactly = _plan([delta(1, age_h=3), delta(2, age_h=1)], pol)
    assert exactly.tasks[0].input_files == 2
    beyond = _plan([delta(1, age_h=3.01), delta(2, age_h=1)], pol)
    assert beyond.tasks == ()


def test_a_merge_stops_at_the_target_size(quiet: Policy) -> None:
    pol = with_overrides(quiet, {"clustering": {"level1": {"min_files": 2, "target_bytes": 8 * MiB}}})
    p = _plan([delta(v, size=3 * MiB) for v in range(1, 6)], pol)
    assert p.tasks[0].input_files == 3  # 9 MiB reached the 8 MiB target
    assert p.tasks[0].expected_output_bytes == 9 * MiB  # clustering keeps every row version


def test_levels_interleaved_in_version_order_split_runs(quiet: Policy) -> None:
    pol = with_overrides(quiet, {"clustering": {"level1": {"min_files": 3}}})
    files = [delta(1), delta(2), delta(3, level=1, max_version=10), delta(11), delta(12), delta(13)]
    p = _plan(files, pol)
    assert p.tasks[0].inputs == tuple(f.path for f in files[3:])


def test_level1_files_merge_into_level2_when_level0_has_nothing(quiet: Policy) -> None:
    pol = with_overrides(quiet, {"clustering": {"level2": {"min_files": 3}}})
    files = [delta(1, level=1, max_version=10), delta(11, level=1, max_version=20), delta(21, level=1, max_version=30)]
    p = _plan(files, pol)
    assert (p.tasks[0].target_level, p.tasks[0].input_files) == (2, 3)
    assert p.decisions[0].rule == "clustering.level2.min_files"


@pytest.mark.parametrize(("n", "merged"), [(2, 0), (3, 3), (4, 4)])
def test_level2_min_files_boundary(quiet: Policy, n: int, merged: int) -> None:
    pol = with_overrides(quiet, {"clustering": {"level2": {"min_files": 3}}})
    p = _plan(_level1(n), pol)
    assert [(t.target_level, t.input_files) for t in p.tasks] == ([(2, merged)] if merged else [])


def test_level1_files_merge_into_level2_at_exactly_trigger_bytes(quiet: Policy) -> None:
    pol = with_overrides(quiet, {"clustering": {"level2": {"trigger_bytes": 20 * MiB}}})
    at = _plan(_level1(2, size=10 * MiB), pol)
    assert [(t.target_level, t.input_files) for t in at.tasks] == [(2, 2)]
    assert at.decisions[0].rule == "clustering.level2.trigger_bytes"
    assert at.tasks[0].reason.endswith("20.0 MiB >= trigger_bytes 20.0 MiB")
    below = _plan([*_level1(1, size=10 * MiB), delta(11, level=1, max_version=20, size=10 * MiB - 1)], pol)
    assert below.tasks == ()
    assert "< trigger_bytes 20.0 MiB" in below.decisions[0].message
    above = _plan([*_level1(1, size=10 * MiB), delta(11, level=1, max_version=20, size=10 * MiB + 1)], pol)
    assert [t.target_level for t in above.tasks] == [2]


def test_quiet_level1_files_merge_once_the_oldest_reaches_level2_max_age(quiet: Policy) -> None:
    pol = with_overrides(quiet, {"clustering": {"level2": {"max_age_hours": 6}}})
    assert _plan(_level1(2, age_h=5.99), pol).tasks == ()
    p = _plan(_level1(2, age_h=6), pol)
    assert [t.target_level for t in p.tasks] == [2] and p.decisions[0].rule == "clustering.level2.max_age_hours"
    assert p.tasks[0].reason.endswith("oldest 6 h >= max_age_hours 6 h")
    assert [t.target_level for t in _plan(_level1(2, age_h=6.01), pol).tasks] == [2]


def test_a_single_old_level1_file_is_never_merged_alone(quiet: Policy) -> None:
    pol = with_overrides(quiet, {"clustering": {"level2": {"max_age_hours": 1}}})
    assert _plan(_level1(1, age_h=100), pol).tasks == ()


@pytest.mark.parametrize(("target", "merged"), [(6 * MiB, 2), (9 * MiB - 1, 3), (9 * MiB, 3), (9 * MiB + 1, 4)])
def test_level1_target_bytes_boundary(quiet: Policy, target: int, merged: int) -> None:
    pol = with_overrides(quiet, {"clustering": {"level1": {"min_files": 2, "target_bytes": target}}})
    p = _plan([delta(v, size=3 * MiB) for v in range(1, 7)], pol)
    assert p.tasks[0].input_files == merged  # inputs are added while they hold less than target_bytes


@pytest.mark.parametrize(("target", "merged"), [(6 * MiB, 2), (9 * MiB - 1, 3), (9 * MiB, 3), (9 * MiB + 1, 4)])
def test_level2_target_bytes_boundary(quiet: Policy, target: int, merged: int) -> None:
    pol = with_overrides(quiet, {"clustering": {"level1": {"target_bytes": target},
                                                "level2": {"min_files": 2, "target_bytes": target}}})
    p = _plan(_level1(6, size=3 * MiB), pol)
    assert [(t.target_level, t.input_files) for t in p.tasks] == [(2, merged)]


@pytest.mark.parametrize(("n", "merged"), [(4, 0), (5, 5), (6, 5)])
def test_max_input_files_boundary(quiet: Policy, n: int, merged: int) -> None:
    pol = with_overrides(quiet, {"clustering": {"max_input_files": 5, "level1": {"min_files": 5},
                                                "level2": {"min_files": 2}}})
    files = [delta(v) for v in range(1, n + 1)]
    p = _plan(files, pol)
    assert [t.inputs for t in p.tasks] == ([tuple(f.path for f in files[:merged])] if merged else [])


def test_overlapping_version_ranges_are_never_split() -> None:
    files = [delta(1), delta(2, max_version=5), delta(3), delta(6)]
    assert cut_points(sorted(files, key=lambda f: (f.min_version, f.max_version, f.path))) == [
        True, True, False, True, True]


def test_a_merge_ends_only_where_no_other_file_overlaps(quiet: Policy) -> None:
    pol = with_overrides(quiet, {"clustering": {"level1": {"min_files": 2}}})
    # versions 1, 2..5 (level 1), 3 (level 0 inside 2..5), 6, 7: the level-0 file 3 can't merge with 6 and 7
    files = [delta(1), delta(2, level=1, max_version=5), delta(3), delta(6), delta(7)]
    p = _plan(files, pol)
    assert p.tasks[0].inputs == (files[3].path, files[4].path)


def test_disabled_clustering_plans_nothing_and_says_so(quiet: Policy) -> None:
    pol = with_overrides(quiet, {"clustering": {"enabled": False}})
    p = _plan([delta(v) for v in range(1, 30)], pol)
    assert p.tasks == ()
    assert p.decisions[0].rule == "clustering.enabled"


def test_max_input_files_caps_one_task(quiet: Policy) -> None:
    pol = with_overrides(quiet, {"clustering": {"max_input_files": 12}})
    p = _plan([delta(v, size=1024) for v in range(1, 40)], pol)
    assert p.tasks[0].input_files == 12


def test_default_policy_explanation_reads_like_the_issue_example() -> None:
    p = plan(snapshot([delta(1, age_h=0.5), delta(2, age_h=0.4), delta(3, age_h=0.3)]), policy(), NOW)
    msg = p.decisions[0].message
    assert msg.startswith("no clustering, 3 level-0 files < min_files 12, 3.0 MiB < trigger_bytes 32.0 MiB and oldest")
    assert "< max_age_hours 1 h" in msg


def test_a_naive_now_is_refused_with_an_input_error_naming_it(quiet: Policy) -> None:
    from datetime import datetime

    from maintd.errors import InvalidInputError

    with pytest.raises(InvalidInputError, match=r"2024-06-01T12:00:00\) has no time zone"):
        plan(snapshot([delta(1)]), quiet, datetime(2024, 6, 1, 12), "file:///t")


def _candidate(files, pol):  # type: ignore[no-untyped-def]
    """The clustering rule alone on one bucket of ``files`` (no compaction, no ranking)."""
    (stats,) = bucket_stats(snapshot(files), NOW)
    return clustering_candidate(stats, pol.clustering)


def test_disabled_clustering_and_a_bucket_without_deltas_say_so_in_their_own_words(quiet: Policy) -> None:
    off = with_overrides(quiet, {"clustering": {"enabled": False}})
    assert _candidate([delta(1), delta(2)], off) == Skip("clustering.enabled", "clustering disabled")
    assert _candidate([base(10)], quiet) == Skip("no_delta_files", "no DeltaFiles to cluster")


def test_a_merge_reason_names_its_inputs_and_every_trigger_that_fired(quiet: Policy) -> None:
    pol = with_overrides(quiet, {"clustering": {"level1": {"min_files": 2, "trigger_bytes": 2 * MiB,
                                                           "max_age_hours": 6}}})
    c = _candidate([delta(1, age_h=1), delta(2, age_h=6)], pol)
    assert isinstance(c, Candidate)
    assert (c.kind, c.target_level, c.rule, c.expected_output_bytes) == ("cluster", 1, "clustering.level1.min_files",
                                                                         2 * MiB)
    assert c.reason == ("merge 2 level-0 files (2.0 MiB) into level 1: 2 files >= min_files 2; "
                        "2.0 MiB >= trigger_bytes 2.0 MiB; oldest 6 h >= max_age_hours 6 h")


def test_a_level1_merge_reason_names_level1_inputs_and_the_level2_knob(quiet: Policy) -> None:
    pol = with_overrides(quiet, {"clustering": {"level2": {"trigger_bytes": 2 * MiB}}})
    c = _candidate(_level1(2), pol)
    assert isinstance(c, Candidate)
    assert (c.target_level, c.rule) == (2, "clustering.level2.trigger_bytes")
    assert c.reason == "merge 2 level-1 files (2.0 MiB) into level 2: 2.0 MiB >= trigger_bytes 2.0 MiB"


def test_a_merge_takes_two_files_even_when_the_first_alone_holds_the_target(quiet: Policy) -> None:
    pol = with_overrides(quiet, {"clustering": {"level1": {"min_files": 2, "target_bytes": MiB}}})
    files = [delta(v, size=3 * MiB) for v in range(1, 5)]
    c = _candidate(files, pol)
    assert isinstance(c, Candidate)
    assert c.inputs == tuple(files[:2])


def test_the_age_of_a_run_is_that_of_its_oldest_file_wherever_it_is(quiet: Policy) -> None:
    pol = with_overrides(quiet, {"clustering": {"level1": {"max_age_hours": 6}}})
    c = _candidate([delta(1, age_h=1), delta(2, age_h=6), delta(3, age_h=2)], pol)
    assert isinstance(c, Candidate) and c.rule == "clustering.level1.max_age_hours"
    assert c.reason.endswith("oldest 6 h >= max_age_hours 6 h")


def test_the_time_span_counts_the_oldest_commit_within_each_file(quiet: Policy) -> None:
    pol = with_overrides(quiet, {"clustering": {"max_time_span_hours": 2, "level1": {"min_files": 2}}})
    # the second file itself spans 1 to 3.5 hours ago: with the first (1 hour ago) 2.5 hours, too long
    assert _plan([delta(1, age_h=1), delta(2, age_h=1, span_h=2.5)], pol).tasks == ()
    assert _plan([delta(1, age_h=1, span_h=2.5), delta(2, age_h=1)], pol).tasks == ()
    assert _plan([delta(1, age_h=1, span_h=1), delta(2, age_h=1, span_h=2)], pol).tasks[0].input_files == 2


def test_a_run_cut_by_the_time_span_starts_again_at_the_file_that_cut_it(quiet: Policy) -> None:
    pol = with_overrides(quiet, {"clustering": {"max_time_span_hours": 2, "level1": {"min_files": 2}}})
    files = [delta(1, age_h=10), delta(2, age_h=4), delta(3, age_h=3.5), delta(4, age_h=3)]
    c = _candidate(files, pol)
    assert isinstance(c, Candidate)
    assert c.inputs == tuple(files[1:])


def test_a_file_ending_at_the_version_the_next_starts_at_is_not_a_cut_point() -> None:
    assert cut_points([delta(1, max_version=5), delta(5), delta(6)]) == [True, False, True, True]
    assert cut_points([delta(0), delta(1)]) == [True, True, True]
    assert cut_points([]) == [True]


def test_why_not_names_the_run_with_the_most_files_then_the_most_bytes(quiet: Policy) -> None:
    pol = with_overrides(quiet, {"clustering": {"level1": {"min_files": 5}, "level2": {"min_files": 5}}})
    # level-0 runs split by a level-1 file: 2 files of 5 MiB, then 3 files of 1 MiB
    split = delta(3, level=1, max_version=10, age_h=0.5)
    most_files = _candidate([delta(1, size=5 * MiB), delta(2, size=5 * MiB), split,
                             delta(11), delta(12), delta(13)], pol)
    assert most_files == Skip("clustering.below_thresholds",
                              "no clustering, 3 level-0 files in the largest mergeable run < min_files 5, "
                              "3.0 MiB < trigger_bytes 32.0 MiB and oldest 6 min < max_age_hours 416.7 d; "
                              "1 level-1 files < min_files 5, 1.0 MiB < trigger_bytes 128.0 MiB and oldest 30 min "
                              "< max_age_hours 416.7 d")
    # two runs of 2 files: the larger one (the second) is named
    most_bytes = _candidate([delta(1), delta(2), split, delta(11, size=2 * MiB), delta(12, size=2 * MiB)], pol)
    assert isinstance(most_bytes, Skip)
    assert most_bytes.message.startswith("no clustering, 2 level-0 files in the largest mergeable run < min_files 5, "
                                         "4.0 MiB < trigger_bytes")


def test_why_not_says_when_a_level_has_no_mergeable_file_and_counts_isolated_files(quiet: Policy) -> None:
    pol = with_overrides(quiet, {"clustering": {"isolation_bytes": 40 * MiB, "level1": {"target_bytes": 8 * MiB},
                                                "level2": {"target_bytes": 8 * MiB}}})
    s = _candidate([delta(1, size=40 * MiB + 1), delta(2, size=50 * MiB)], pol)
    assert s == Skip("clustering.below_thresholds", "no clustering, no mergeable level-0 files; "
                     "no mergeable level-1 files; 2 isolated files > isolation_bytes 40.0 MiB")


def test_a_run_cut_by_the_time_span_still_merges_the_files_before_the_cut(quiet: Policy) -> None:
    pol = with_overrides(quiet, {"clustering": {"max_time_span_hours": 2, "level1": {"min_files": 2}}})
    files = [delta(1, age_h=5), delta(2, age_h=4), delta(3, age_h=1)]
    c = _candidate(files, pol)
    assert isinstance(c, Candidate)
    assert c.inputs == tuple(files[:2])


def test_max_input_files_counts_from_where_a_run_starts(quiet: Policy) -> None:
    pol = with_overrides(quiet, {"clustering": {"max_input_files": 3, "level1": {"min_files": 3},
                                                "level2": {"min_files": 3}}})
    files = [delta(1, level=1), *(delta(v) for v in range(2, 6))]
    c = _candidate(files, pol)
    assert isinstance(c, Candidate)
    assert c.inputs == tuple(files[1:4])


def test_the_target_size_counts_from_where_a_run_starts(quiet: Policy) -> None:
    pol = with_overrides(quiet, {"clustering": {"level1": {"min_files": 2, "target_bytes": 6 * MiB}}})
    files = [delta(1, level=1), *(delta(v, size=3 * MiB) for v in range(2, 6))]
    c = _candidate(files, pol)
    assert isinstance(c, Candidate)
    assert c.inputs == tuple(files[1:3])


def test_a_file_of_exactly_isolation_bytes_is_not_counted_isolated(quiet: Policy) -> None:
    pol = with_overrides(quiet, {"clustering": {"isolation_bytes": 40 * MiB, "level1": {"target_bytes": 8 * MiB},
                                                "level2": {"target_bytes": 8 * MiB}}})
    s = _candidate([delta(1, size=40 * MiB), delta(2, size=50 * MiB)], pol)
    assert isinstance(s, Skip)
    assert s.message.startswith("no clustering, 1 level-0 files < min_files 12, 40.0 MiB < trigger_bytes")
    assert s.message.endswith("; no mergeable level-1 files; 1 isolated files > isolation_bytes 40.0 MiB")
