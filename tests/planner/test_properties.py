"""Property tests over random snapshots and policies: the planner's invariants hold for any input."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from planner_helpers import HOUR, NOW, NOW_MS, MiB, snapshot

from maintd.planner import MaintenancePlan, Policy, default_policy, plan, with_overrides
from maintd.table.files.keys import overlaps
from maintd.table.log.actions import AddFile
from maintd.table.log.snapshot import Snapshot

STEP_MS = 7 * 60_000  # one commit every 7 minutes


def _time(v: int, top: int) -> int:
    return NOW_MS - (top - v) * STEP_MS


KEYS_PER_BASE = 1000


@st.composite
def key_span(draw: st.DrawFn, bases: int) -> tuple[tuple[int, ...] | None, tuple[int, ...] | None]:
    """A DeltaFile's keys: unknown, spread over every base, or within a narrow band (growing keys)."""
    kind = draw(st.sampled_from(["none", "wide", "narrow", "narrow"]))
    if kind == "none":
        return None, None
    top = max(1, bases) * KEYS_PER_BASE + 500
    if kind == "wide":
        return (0,), (top,)
    lo = draw(st.integers(0, top))
    return (lo,), (lo + draw(st.integers(0, 300)),)


@st.composite
def buckets(draw: st.DrawFn, bucket: int, top: int) -> list[AddFile]:
    files: list[AddFile] = []
    v = draw(st.integers(0, 5))
    bases = draw(st.integers(1, 4)) if v and draw(st.booleans()) else 0
    for k in range(bases):  # BaseFiles of disjoint key ranges, with gaps between them
        files.append(AddFile(path=f"b{bucket}/base{k}", bucket=bucket, kind="base", level=None, rows=1000,
                             bytes=draw(st.integers(1, 400)) * MiB, min_version=0, max_version=v - 1,
                             min_commit_time=_time(0, top), max_commit_time=_time(v - 1, top),
                             modification_time=_time(v - 1, top) + draw(st.integers(0, 3)) * HOUR,
                             key_min=(k * KEYS_PER_BASE,), key_max=(k * KEYS_PER_BASE + 700,)))
    for i in range(draw(st.integers(0, 25))):
        level = draw(st.sampled_from([0, 0, 0, 1, 2]))
        same = level == 0 and files and files[-1].kind == "delta" and files[-1].level == 0 and draw(st.booleans())
        lo = files[-1].min_version if same else v
        hi = lo if level == 0 else lo + draw(st.integers(0, 10))
        v = hi + 1
        size = draw(st.sampled_from([1, 4, 30, 100, 300])) * MiB + draw(st.integers(0, 1000))
        rows = draw(st.integers(1, 1000))
        kmin, kmax = draw(key_span(bases))
        files.append(AddFile(path=f"b{bucket}/d{i}", bucket=bucket, kind="delta", level=level, rows=rows,
                             bytes=size, min_version=lo, max_version=hi, min_commit_time=_time(lo, top),
                             max_commit_time=_time(hi, top), delete_rows=draw(st.integers(0, rows)),
                             modification_time=_time(hi, top), key_min=kmin, key_max=kmax))
    return files


@st.composite
def snapshots(draw: st.DrawFn) -> Snapshot:
    top = 400
    files = [f for b in range(draw(st.integers(1, 4))) for f in draw(buckets(b, top))]
    return snapshot(files, version=top, retain_hours=draw(st.sampled_from([0, 24, 168])))


def _grid(lo: float, hi: float, per_unit: int = 10) -> st.SearchStrategy[float]:
    """Hours or ratios from ``lo`` to ``hi`` in steps of ``1 / per_unit``."""
    return st.integers(round(lo * per_unit), round(hi * per_unit)).map(lambda n: n / per_unit)


def _mib(lo: int, hi: int) -> st.SearchStrategy[int]:
    """Sizes on the scale of the snapshots' files: whole MiB, sometimes plus the few bytes files carry."""
    return st.builds(lambda m, b: m * MiB + b, st.integers(lo, hi), st.sampled_from([0, 0, 500, 1000]))


_mostly_true = st.sampled_from([True, True, True, False])


@st.composite
def levels(draw: st.DrawFn, max_input_files: int, target_bytes: int) -> dict[str, Any]:
    small, any_ = min(max_input_files, 5), min(max_input_files, 30)
    return {"min_files": draw(st.one_of(st.integers(2, small), st.integers(2, any_))),
            "trigger_bytes": draw(_mib(1, 1024)), "target_bytes": target_bytes, "max_age_hours": draw(_grid(0.1, 60))}


@st.composite
def policy_overrides(draw: st.DrawFn) -> dict[str, Any]:
    """Every knob drawn, valid combinations only: level1 target <= level2 target <= isolation_bytes,
    min_files <= max_input_files, min_interval_hours <= max_interval_hours, update_delete_share in (0, 1].

    The distributions lean towards values that make rules fire on the snapshots above (small min_files, spans of
    hours, budgets that sometimes defer), so both clustering and compaction tasks are common.
    """
    isolation = draw(st.one_of(_mib(1, 512), _mib(300, 1024)))  # half the time hardly anything is isolated
    target2 = draw(st.integers(1, isolation))
    target1 = draw(st.integers(1, target2))
    max_input_files = draw(st.one_of(st.integers(2, 30), st.just(1000)))
    max_interval = draw(_grid(0.1, 200))
    return {
        "clustering": {"enabled": draw(_mostly_true), "isolation_bytes": isolation,
                       "max_time_span_hours": draw(st.one_of(_grid(0.1, 48), _grid(2, 48))),
                       "max_input_files": max_input_files,
                       "level1": draw(levels(max_input_files, target1)),
                       "level2": draw(levels(max_input_files, target2))},
        "compaction": {"enabled": draw(st.booleans()), "target_file_bytes": draw(_mib(1, 512)),
                       "max_delta_files": draw(st.integers(1, 40)),
                       "delta_base_ratio": draw(_grid(0.01, 3, 100)), "max_interval_hours": max_interval,
                       "min_interval_hours": draw(st.one_of(st.just(0.0), _grid(0.1, max_interval))),
                       "update_delete_share": draw(_grid(0.01, 1, 100)), "retention_pressure": draw(st.booleans())},
        "ranking": {"file_cost_bytes": draw(st.one_of(st.integers(1, 1024), _mib(1, 64))),
                    "age_weight_per_day": draw(_grid(0, 5))},
        "budget": {"max_bytes": draw(st.one_of(st.integers(1, MiB), *[_mib(1, 16384)] * 3)),  # 1 in 4 tiny
                   "max_tasks": draw(st.integers(1, 10))},
        # Targets steer tuning, not the planner: drawn so that the invariants are seen to hold whatever they are.
        "target": {"read_files_per_bucket": draw(st.one_of(st.none(), _grid(1, 50))),
                   "merge_delay_minutes": draw(st.one_of(st.none(), _grid(1, 600))),
                   "write_amplification": draw(st.one_of(st.none(), _grid(1, 20)))},
    }


DEFAULT = default_policy()  # parsed once: loading the YAML costs more than planning a random snapshot


def policies() -> st.SearchStrategy[Policy]:
    return policy_overrides().map(lambda over: with_overrides(DEFAULT, over))


def _leaves(d: dict[str, Any], prefix: str = "") -> set[str]:
    return {x for k, v in d.items() for x in (_leaves(v, f"{prefix}{k}.") if isinstance(v, dict) else {prefix + k})}


def _order(s: Snapshot, bucket: int) -> list[AddFile]:
    fs = [f for f in s.files.values() if f.bucket == bucket and f.kind == "delta"]
    return sorted(fs, key=lambda f: (f.min_version, f.max_version, f.path))


def _check_invariants(s: Snapshot, p: MaintenancePlan, pol: Policy) -> None:
    seen: set[str] = set()
    for t in p.tasks:
        assert not seen & set(t.inputs), "a file is in two tasks"
        seen |= set(t.inputs)
        ins = [s.files[x] for x in t.inputs]
        assert len({f.bucket for f in ins}) == 1
        if t.kind == "compact":
            bucket = [f for f in s.files.values() if f.bucket == t.bucket]
            assert {f.path for f in bucket if f.kind == "delta"} <= set(t.inputs), "a DeltaFile is left out"
            kept = [f for f in bucket if f.kind == "base" and f.path not in t.inputs]
            assert not kept or sum(f.bytes for f in kept) >= pol.compaction.target_file_bytes
            assert not any(overlaps(k.key_min, k.key_max, f.key_min, f.key_max) for k in kept for f in ins
                           if f.kind == "delta"), "a kept BaseFile's key range is touched by a DeltaFile"
            assert t.target_file_bytes == pol.compaction.target_file_bytes
            continue
        assert len(ins) >= 2
        assert all(f.bytes <= pol.clustering.isolation_bytes for f in ins), "an isolated file is merged"
        assert all(f.level == (t.target_level or 0) - 1 for f in ins)
        span = max(f.max_commit_time for f in ins) - min(f.min_commit_time for f in ins)
        assert span <= pol.clustering.max_time_span_hours * HOUR, "merge beyond the time-span limit"
        lo, hi = min(f.min_version for f in ins), max(f.max_version for f in ins)
        others = [f for f in _order(s, t.bucket) if f.path not in t.inputs]
        assert all(f.max_version < lo or f.min_version > hi for f in others), "inputs are not contiguous"
    assert len({t.bucket for t in p.tasks}) == len(p.tasks), "a bucket got two tasks"
    assert len(p.tasks) <= pol.budget.max_tasks
    assert len(p.tasks) <= 1 or p.input_bytes <= pol.budget.max_bytes, "the budget let too many bytes through"
    decided = {d.bucket: d.action for d in p.decisions}
    assert all(decided[t.bucket] == t.kind for t in p.tasks)
    assert sum(1 for a in decided.values() if a in ("cluster", "compact")) == len(p.tasks)


def _apply(s: Snapshot, p: MaintenancePlan) -> Snapshot:
    """The snapshot after the plan's tasks, each writing one file per key segment (as execution does: a
    compaction's outputs never span a BaseFile it keeps)."""
    files = dict(s.files)
    for k, t in enumerate(p.tasks):
        ins = [files.pop(x) for x in t.inputs]
        kind = "base" if t.kind == "compact" else "delta"
        kept = [f for f in files.values() if f.bucket == t.bucket and f.kind == "base"] if kind == "base" else []
        for j, seg in enumerate(_segments(ins, kept)):
            share = max(1, t.expected_output_bytes * len(seg) // len(ins))
            files[f"out{s.version}-{k}-{j}"] = AddFile(
                path=f"out{s.version}-{k}-{j}", bucket=t.bucket, kind=kind, level=t.target_level,
                rows=t.input_rows, bytes=share, min_version=min(f.min_version for f in ins),
                max_version=max(f.max_version for f in ins), min_commit_time=min(f.min_commit_time for f in ins),
                max_commit_time=max(f.max_commit_time for f in ins), modification_time=NOW_MS,
                key_min=_hull(seg)[0], key_max=_hull(seg)[1])
    return snapshot(files.values(), version=s.version + 1, retain_hours=s.retain_hours)


def _hull(fs: list[AddFile]) -> tuple[tuple[Any, ...] | None, tuple[Any, ...] | None]:
    if any(f.key_min is None or f.key_max is None for f in fs):
        return None, None
    return min(f.key_min for f in fs if f.key_min), max(f.key_max for f in fs if f.key_max)


def _segments(ins: list[AddFile], kept: list[AddFile]) -> list[list[AddFile]]:
    """Inputs grouped by the gaps between kept BaseFiles (inputs with unknown keys: one group)."""
    if not kept or any(f.key_min is None for f in ins):
        return [ins]
    cuts = sorted(k.key_min for k in kept if k.key_min is not None)
    groups: dict[int, list[AddFile]] = {}
    for f in ins:
        groups.setdefault(sum(1 for c in cuts if f.key_min is not None and c <= f.key_min), []).append(f)
    return [groups[i] for i in sorted(groups)]


def _bases_are_disjoint(s: Snapshot) -> bool:
    for b in {f.bucket for f in s.files.values()}:
        bases = [f for f in s.files.values() if f.bucket == b and f.kind == "base"]
        if any(overlaps(x.key_min, x.key_max, y.key_min, y.key_max) for x, y in itertools.combinations(bases, 2)):
            return False
    return True


def _ranges_do_not_interleave(s: Snapshot) -> bool:
    for b in {f.bucket for f in s.files.values()}:
        fs = _order(s, b)
        for a, c in itertools.pairwise(fs):
            same_commit = a.min_version == a.max_version == c.min_version == c.max_version
            if not (a.max_version < c.min_version or same_commit):
                return False
    return True


SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@settings(max_examples=20, deadline=None)
@given(policy_overrides())
def test_the_policy_strategy_draws_every_knob_of_the_model(over: dict[str, Any]) -> None:
    assert _leaves(over) == _leaves(DEFAULT.model_dump())


@pytest.mark.slow
@SETTINGS
@given(snapshots(), policies())
def test_every_plan_respects_the_merge_invariants(s: Snapshot, pol: Policy) -> None:
    _check_invariants(s, plan(s, pol, NOW, "t"), pol)


@pytest.mark.slow
@SETTINGS
@given(snapshots(), policies())
def test_planning_is_deterministic_and_round_trips_through_json(s: Snapshot, pol: Policy) -> None:
    a, b = plan(s, pol, NOW, "t"), plan(s, pol, NOW, "t")
    assert a == b
    assert MaintenancePlan.model_validate_json(a.model_dump_json()) == a
    assert len(a.decisions) == len({(f.bucket) for f in s.files.values()})


@pytest.mark.slow
@SETTINGS
@given(snapshots(), policies())
def test_applying_plans_converges_and_never_replans_the_same_inputs(s: Snapshot, pol: Policy) -> None:
    assert _ranges_do_not_interleave(s)
    bound = 2 * len(s.files) + 1
    done: set[frozenset[str]] = set()
    for _ in range(bound):
        p = plan(s, pol, NOW, "t")
        _check_invariants(s, p, pol)
        if not p.tasks:
            return
        assert not done & {frozenset(t.inputs) for t in p.tasks}
        done |= {frozenset(t.inputs) for t in p.tasks}
        s = _apply(s, p)
        assert _ranges_do_not_interleave(s), "a merge broke the version-order invariant"
        assert _bases_are_disjoint(s), "a compaction made BaseFiles whose key ranges overlap"
    raise AssertionError("planning did not converge")
