"""Which BaseFiles a compaction rewrites, at the boundaries of its rules, and how it explains them.

These pin the behaviour mutation testing found unpinned (docs/testing.md): the half-target "small" bound,
small neighbours joining from both sides (and only their true neighbours), a single BaseFile, BaseFiles
without key statistics, and the words of the delta/base ratio.
"""

from __future__ import annotations

from planner_helpers import NOW, NOW_MS, MiB, base, delta, policy, snapshot

from maintd.planner import Policy, plan, with_overrides
from maintd.planner.compaction import rewrite_split
from maintd.planner.stats import BucketStats
from maintd.table.log.actions import AddFile

TARGET = 100 * MiB


def keyed(f: AddFile, lo: int | None, hi: int | None) -> AddFile:
    return f.model_copy(update={"key_min": None if lo is None else (lo,), "key_max": None if hi is None else (hi,)})


def b(name: str, size: float, lo: int | None, hi: int | None) -> AddFile:
    """A BaseFile of ``size`` target files holding keys lo..hi."""
    f = base(0, size=int(size * TARGET))
    return keyed(f.model_copy(update={"path": f"b/base-{name}.parquet"}), lo, hi)


def d(lo: int, hi: int, size: int = MiB) -> AddFile:
    return keyed(delta(1, size=size), lo, hi)


def split(bases: list[AddFile], deltas: list[AddFile]) -> tuple[list[str], list[str]]:
    stats = BucketStats(partition=(), bucket=0, now_ms=NOW_MS, bases=tuple(bases), deltas=tuple(deltas))
    pol = policy(compaction={"target_file_bytes": TARGET}).compaction
    rewritten, kept = rewrite_split(stats, pol)
    name = lambda f: f.path.rsplit("-", 1)[-1].removesuffix(".parquet")  # noqa: E731
    return [name(f) for f in rewritten], [name(f) for f in kept]


def test_a_base_below_half_the_target_joins_its_touched_neighbour_and_one_of_half_does_not() -> None:
    touched, big = b("T", 1, 0, 9), b("X", 2, 40, 49)
    assert split([touched, b("S", 0.4, 10, 19), big], [d(1, 2)]) == (["T", "S"], ["X"])
    assert split([touched, b("S", 0.5, 10, 19), big], [d(1, 2)]) == (["T"], ["S", "X"])


def test_small_bases_join_towards_the_front_through_a_run_of_small_neighbours() -> None:
    # X S1 S2 T: S2 joins T from behind, then S1 joins S2 (the backward pass, every index).
    assert split([b("X", 2, 0, 9), b("S1", 0.1, 10, 19), b("S2", 0.1, 20, 29), b("T", 1, 30, 39)],
                 [d(31, 32)]) == (["S1", "S2", "T"], ["X"])


def test_small_bases_join_towards_the_back_and_the_first_only_joins_its_real_neighbour() -> None:
    # T S X: S joins T in the forward pass, from index 1.
    assert split([b("T", 1, 0, 9), b("S", 0.1, 10, 19), b("X", 2, 20, 29)], [d(1, 2)]) == (["T", "S"], ["X"])
    # S X T: the first BaseFile has no neighbour before it (not the last one, by wrapping around).
    assert split([b("S", 0.1, 0, 9), b("X", 2, 10, 19), b("T", 1, 20, 29)], [d(21, 22)]) == (["T"], ["S", "X"])
    # T X S: nor has the last one a neighbour after it.
    assert split([b("T", 1, 0, 9), b("X", 2, 10, 19), b("S", 0.1, 20, 29)], [d(1, 2)]) == (["T"], ["X", "S"])


def test_a_single_base_is_always_rewritten_even_if_no_delta_touches_it() -> None:
    assert split([b("X", 2, 0, 9)], [d(50, 60)]) == (["X"], [])


def test_bases_without_key_statistics_sort_first() -> None:
    rewritten, kept = split([b("K2", 1, 20, 29), b("U", 1, None, None), b("K1", 1, 10, 19)], [d(11, 12)])
    assert rewritten == ["U", "K1"] and kept == ["K2"]


def _plan_reason(files: list[AddFile], pol: Policy) -> str:
    p = plan(snapshot(files), pol, NOW, "file:///t")
    return p.decisions[0].message


def test_the_ratio_is_explained_by_the_base_files_it_counts(quiet: Policy) -> None:
    pol = with_overrides(quiet, {"compaction": {"delta_base_ratio": 0.5, "target_file_bytes": TARGET}})
    whole = _plan_reason([b("A", 1, 0, 9), d(1, 2, size=60 * MiB)], pol)
    assert ": delta/base bytes 0.60 >= delta_base_ratio 0.5" in whole
    part = _plan_reason([b("A", 1, 0, 9), b("B", 2, 10, 19), d(1, 2, size=60 * MiB)], pol)
    assert "delta bytes / bytes of the 1 BaseFile(s) they touch 0.60 >= delta_base_ratio 0.5" in part
    untouched = _plan_reason([b("A", 1, 0, 9), b("B", 2, 10, 19), d(50, 60, size=60 * MiB)], pol)
    assert ", DeltaFiles touch no BaseFile's key range, " in untouched


def test_no_delete_estimate_without_delta_rows(quiet: Policy) -> None:
    pol = with_overrides(quiet, {"compaction": {"max_delta_files": 1}})
    p = plan(snapshot([base(0), delta(1, rows=0)]), pol, NOW, "file:///t")
    [task] = p.tasks
    assert task.expected_output_bytes == task.input_bytes, "nothing is estimated dropped"


def test_quiet_rules_say_the_measured_ratio_and_delete_share(quiet: Policy) -> None:
    pol = with_overrides(quiet, {"compaction": {"delta_base_ratio": 0.5, "update_delete_share": 0.6,
                                                "target_file_bytes": TARGET}})
    reason = _plan_reason([b("A", 1, 0, 9), d(1, 2, size=10 * MiB).model_copy(update={"rows": 4, "delete_rows": 2})],
                          pol)
    assert "delta/base bytes 0.10 < delta_base_ratio 0.5" in reason
    assert "delete share 0.50 < update_delete_share 0.6" in reason


def test_the_ratio_fires_on_a_single_byte_of_deltas(quiet: Policy) -> None:
    pol = with_overrides(quiet, {"compaction": {"delta_base_ratio": 0.5, "target_file_bytes": TARGET}})
    tiny_base = base(0, size=1).model_copy(update={"key_min": (0,), "key_max": (9,)})
    p = plan(snapshot([tiny_base, d(1, 2, size=1)]), pol, NOW, "file:///t")
    assert [t.kind for t in p.tasks] == ["compact"] and p.decisions[0].rule == "compaction.delta_base_ratio"


def test_the_delete_share_fires_from_one_delete_by_its_own_rule_and_never_without_rows(quiet: Policy) -> None:
    pol = with_overrides(quiet, {"compaction": {"delta_base_ratio": 1000, "update_delete_share": 0.6,
                                                "target_file_bytes": TARGET}})
    one = d(1, 2).model_copy(update={"rows": 1, "delete_rows": 1})
    p = plan(snapshot([b("A", 1, 0, 9), one]), pol, NOW, "file:///t")
    assert p.decisions[0].rule == "compaction.update_delete_share"
    assert "delete share 1.00 >= update_delete_share 0.6" in p.tasks[0].reason
    empty = d(1, 2).model_copy(update={"rows": 0, "delete_rows": 0})
    reason = _plan_reason([b("A", 1, 0, 9), empty], pol)
    assert ", delete share 0 < update_delete_share 0.6" in reason


def test_a_bucket_that_cannot_compact_says_which_rule_and_why() -> None:
    from maintd.planner.candidates import Skip
    from maintd.planner.compaction import compaction_candidate

    stats = BucketStats(partition=(), bucket=0, now_ms=NOW_MS, bases=(b("A", 1, 0, 9),), deltas=())
    on = policy(compaction={"target_file_bytes": TARGET}).compaction
    off = on.model_copy(update={"enabled": False})
    assert compaction_candidate(stats, off) == Skip("compaction.enabled", "compaction disabled")
    assert compaction_candidate(stats, on) == Skip("no_delta_files",
                                                   "no compaction, no DeltaFiles on top of the BaseFile")


def test_the_words_of_a_compaction_and_of_a_held_back_or_quiet_one() -> None:
    from maintd.planner.compaction import compaction_candidate

    pol = policy(compaction={"target_file_bytes": TARGET, "delta_base_ratio": 0.5, "max_delta_files": 1,
                             "min_interval_hours": 0, "retention_pressure": False}).compaction

    def stats(bases: list[AddFile], deltas: list[AddFile]) -> BucketStats:
        return BucketStats(partition=(), bucket=0, now_ms=NOW_MS, bases=tuple(bases), deltas=tuple(deltas),
                           compaction_clock_ms=NOW_MS - 2 * 3_600_000)

    whole = compaction_candidate(stats([b("A", 1, 0, 9)], [d(1, 2, size=60 * MiB)]), pol)
    assert whole.reason.startswith("compact 1 BaseFile(s) and 1 DeltaFiles")
    assert "1 DeltaFiles >= max_delta_files 1; delta/base bytes 0.60 >= delta_base_ratio 0.5" in whole.reason
    part = compaction_candidate(stats([b("A", 1, 0, 9), b("B", 2, 10, 19)], [d(1, 2)]), pol)
    assert part.reason.startswith("compact 1 of 2 BaseFiles (keeping 1, 200.0 MiB, whose key ranges no DeltaFile")
    held = compaction_candidate(stats([b("A", 1, 0, 9)], [d(1, 2)]), pol.model_copy(update={"min_interval_hours": 3}))
    assert held.rule == "compaction.min_interval_hours"
    assert held.message == ("no compaction, 1 DeltaFiles >= max_delta_files 1 but last compaction 2 h ago "
                            "< min_interval_hours 3 h")
    quiet = compaction_candidate(stats([b("A", 1, 0, 9)], [d(1, 2)]), pol.model_copy(
        update={"max_delta_files": 5, "delta_base_ratio": 100.0}))
    assert quiet.rule == "compaction.below_thresholds"
    assert quiet.message.startswith("no compaction, 1 DeltaFiles < max_delta_files 5, ")
