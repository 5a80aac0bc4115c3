"""Several BaseFiles per bucket: which ones a compaction rewrites, the ratio trigger, and the target size."""

from __future__ import annotations

from planner_helpers import NOW, MiB, base, delta, snapshot

from maintd.planner import Policy, plan, with_overrides
from maintd.table.log.actions import AddFile


def _base(i: int, lo: int, hi: int, size: int = 100 * MiB) -> AddFile:
    return base(0, size=size).model_copy(update={"path": f"b0/base-{i}.parquet", "key_min": (lo,), "key_max": (hi,)})


def _delta(v: int, lo: int | None, hi: int | None, size: int = MiB) -> AddFile:
    keys = {"key_min": (lo,), "key_max": (hi,)} if lo is not None and hi is not None else {}
    return delta(v, size=size).model_copy(update=keys)


def _bucket() -> list[AddFile]:
    """Five BaseFiles of 100 MiB: keys 0-999, 1000-1999, ..., 4000-4999."""
    return [_base(i, i * 1000, i * 1000 + 999) for i in range(5)]


def _policy(quiet: Policy, **compaction: object) -> Policy:
    return with_overrides(quiet, {"compaction": {"max_delta_files": 2, "target_file_bytes": 128 * MiB,
                                                 "min_interval_hours": 0, **compaction}})


def _inputs(files: list[AddFile], pol: Policy) -> set[str]:
    p = plan(snapshot(files), pol, NOW, "file:///t")
    assert [t.kind for t in p.tasks] == ["compact"], p.decisions
    return set(p.tasks[0].inputs)


def test_a_compaction_rewrites_only_the_base_files_whose_key_ranges_the_deltas_touch(quiet: Policy) -> None:
    deltas = [_delta(1, 4100, 4200), _delta(2, 4900, 5100)]  # growing keys: the last range and past it
    p = plan(snapshot([*_bucket(), *deltas]), _policy(quiet), NOW, "file:///t")
    [t] = p.tasks
    assert set(t.inputs) == {"b0/base-4.parquet", *(d.path for d in deltas)}
    assert t.target_file_bytes == 128 * MiB and t.input_bytes == 102 * MiB
    assert "1 of 5 BaseFiles (keeping 4" in t.reason and "BaseFiles of up to 128.0 MiB" in t.reason


def test_deltas_spread_over_every_key_range_rewrite_the_whole_bucket(quiet: Policy) -> None:
    deltas = [_delta(1, 5, 4990), _delta(2, None, None)]
    assert _inputs([*_bucket(), *deltas], _policy(quiet)) == {f.path for f in [*_bucket(), *deltas]}


def test_the_whole_bucket_is_rewritten_when_the_kept_files_hold_less_than_one_target_file(quiet: Policy) -> None:
    files = [_base(0, 0, 999, 60 * MiB), _base(1, 1000, 1999, 60 * MiB), _delta(1, 1500, 1600), _delta(2, 1700, 1800)]
    assert _inputs(files, _policy(quiet)) == {f.path for f in files}
    assert _inputs(files, _policy(quiet, target_file_bytes=50 * MiB)) == {"b0/base-1.parquet", *(
        f.path for f in files if f.kind == "delta")}


def test_small_base_files_next_to_rewritten_ones_are_merged_in(quiet: Policy) -> None:
    files = [*_bucket(), _base(5, 5000, 5100, 10 * MiB), _base(6, 5200, 5300, 10 * MiB), _base(7, 6000, 6999),
             _delta(1, 4100, 4200), _delta(2, 4300, 4400)]
    rewritten = {p for p in _inputs(files, _policy(quiet)) if "base" in p}
    assert rewritten == {"b0/base-4.parquet", "b0/base-5.parquet", "b0/base-6.parquet"}  # not base-7 (large)


def test_deltas_between_base_files_rewrite_none_of_them(quiet: Policy) -> None:
    files = [_base(0, 0, 999), _base(1, 2000, 2999), _delta(1, 1100, 1200), _delta(2, 1300, 1900)]
    assert _inputs(files, _policy(quiet)) == {f.path for f in files if f.kind == "delta"}


def test_the_ratio_compares_the_deltas_with_the_base_files_they_touch(quiet: Policy) -> None:
    pol = _policy(quiet, max_delta_files=1000, delta_base_ratio=0.5)
    bucket = [*_bucket()[:4], _base(4, 4000, 4999, 40 * MiB)]  # 440 MiB of base, the last file 40 MiB
    files = [*bucket, _delta(1, 4100, 4200, 20 * MiB)]  # 20 MiB / 40 MiB touched = 0.5 (of all: 0.05)
    p = plan(snapshot(files), pol, NOW, "file:///t")
    assert p.tasks and p.decisions[0].rule == "compaction.delta_base_ratio"
    assert "bytes of the 1 BaseFile(s) they touch 0.50" in p.decisions[0].message
    below = plan(snapshot([*bucket, _delta(1, 4100, 4200, 20 * MiB - 1)]), pol, NOW, "file:///t")
    assert not below.tasks


def test_deltas_that_touch_no_base_file_do_not_fire_the_ratio(quiet: Policy) -> None:
    pol = _policy(quiet, max_delta_files=1000, delta_base_ratio=0.01)
    p = plan(snapshot([*_bucket(), _delta(1, 6000, 7000, 50 * MiB)]), pol, NOW, "file:///t")
    assert not p.tasks and "touch no BaseFile" in p.decisions[0].message
