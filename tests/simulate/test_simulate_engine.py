"""The simulation engine on hand-made patterns: the trace, the cadence, the planner, reclamation, the estimator."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import maintd.simulate.engine as engine
from maintd.planner import Policy, default_policy, with_overrides
from maintd.simulate import RecordedRun, Schedule, schedule_from_runs, simulate
from maintd.simulate.engine import SimTable, writer_times
from maintd.simulate.pattern import BucketWrite, WritePattern, WriterCommit
from maintd.simulate.sizes import Line, SizeModel, fit_line
from maintd.table.log.actions import AddFile, Field_, Metadata, Protocol
from maintd.table.log.snapshot import Snapshot

MIN = 60_000
HOUR = 60 * MIN
T = int(datetime(2024, 6, 1, tzinfo=UTC).timestamp() * 1000)
SIZES = SizeModel(overhead={"L0": 0, "merged": 0, "base": 0}, upsert_row_bytes=10, delete_row_bytes=5, merge={},
                  base=Line(0, 10), key_overlap=0.5)
OFF = with_overrides(default_policy(), {"clustering": {"enabled": False}, "compaction": {"enabled": False}})


def _start(retain_hours: int = 24, buckets: int = 2) -> Snapshot:
    md = Metadata(table_id="t", fields=(Field_(name="id", type="int64"),), primary_key=("id",), buckets=buckets,
                  properties={"acid.data.retain.hours": str(retain_hours)}, created_time=T - HOUR)
    return Snapshot(version=0, timestamp=T - HOUR, protocol=Protocol(), metadata=md, files=MappingProxyType({}))


def _pattern(times_min: Sequence[int], buckets: int = 2, rows: int = 100, deletes: int = 0) -> WritePattern:
    commits = tuple(WriterCommit(i + 1, T + m * MIN, tuple(BucketWrite((), b, 1, rows, deletes, rows * 10)
                                                           for b in range(buckets)))
                    for i, m in enumerate(times_min))
    span = commits[-1].time_ms - commits[0].time_ms
    gap = (commits[1].time_ms - commits[0].time_ms) if len(commits) > 1 else HOUR
    return WritePattern(table_uri="t", start_ms=commits[0].time_ms, end_ms=commits[-1].time_ms, period_ms=span + gap,
                        commits=commits, commit_times={0: T - HOUR})


def test_the_trace_is_replayed_shifted_by_whole_periods() -> None:
    p = _pattern([0, 10, 20])  # period 30 minutes
    times = [t for t, _ in writer_times(p, T + 20 * MIN, T + 80 * MIN)]
    assert times == [T + m * MIN for m in (30, 40, 50, 60, 70, 80)]
    assert [c.version for _, c in writer_times(p, T + 20 * MIN, T + 50 * MIN)] == [1, 2, 3]
    assert [t for t, _ in writer_times(p, T - 1, T + 20 * MIN)] == [T, T + 10 * MIN, T + 20 * MIN]  # the past as is


def test_passes_run_at_recorded_times_where_there_are_some_and_at_the_interval_elsewhere() -> None:
    s = Schedule(600, 3600, "settings")
    assert s.maintenance_at(0, 1_800_000) == [0, 600_000, 1_200_000, 1_800_000]
    runs = [RecordedRun("maintenance", t) for t in (700_000, 1_300_000, 1_900_000)] + [RecordedRun("reclaim", 5)]
    r = schedule_from_runs(runs, s)
    assert r.maintenance_interval_s == 600 and r.reclamation_interval_s == 3600
    assert r.source == "recorded maintenance runs, settings"
    assert r.maintenance_at(0, 3_100_000) == [100_000, 700_000, 1_300_000, 1_900_000, 2_500_000, 3_100_000]
    assert schedule_from_runs([RecordedRun("maintenance", 1)], s) is s  # one run tells no cadence


def test_without_maintenance_every_write_stays_a_level_0_file_and_nothing_is_rewritten() -> None:
    p = _pattern(list(range(0, 60, 10)))
    run = simulate(_start(), p, SIZES, OFF, Schedule(300, 3600), start_ms=T + 60 * MIN, end_ms=T + 4 * HOUR)
    last = run.samples[-1]
    assert last.files == {"L0": 2 * 18, "L1": 0, "L2": 0, "base": 0}  # 18 commits in 3 h, two buckets each
    assert last.read_amp_mean == 18 and last.maintenance_written == 0 and last.tasks == {"cluster": 0, "compact": 0}
    assert last.writer_bytes == 36 * 1000
    assert run.passes == 37 and run.busy_passes == 0


def test_every_pass_plans_with_the_real_planner_and_commits_exactly_its_tasks(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[Any] = []
    real = engine.plan

    def spy(snapshot: Snapshot, policy: Policy, now: datetime, *args: Any, **kw: Any) -> Any:
        result = real(snapshot, policy, now, *args, **kw)
        calls.append((dict(snapshot.files), result))
        return result

    monkeypatch.setattr(engine, "plan", spy)
    policy = with_overrides(default_policy(), {"clustering": {"level1": {"min_files": 3}}})
    sim = SimTable(_start(), {})
    for m in range(4):
        sim.write(T + m * MIN, _pattern([0]).commits[0])
    tasks = sim.maintain(T + 5 * MIN, policy, SIZES, "t", "p")
    (before, p), = calls
    assert tasks == len(p.tasks) == 2 and all(t.kind == "cluster" for t in p.tasks)
    removed = set(before) - set(sim.files)
    assert removed == {path for t in p.tasks for path in t.inputs}
    added = [f for f in sim.files.values() if f.level == 1]
    assert len(added) == 2 and all(f.rows == 400 and f.min_version == 1 and f.max_version == 4 for f in added)


def test_a_compaction_only_policy_never_leaves_merged_delta_files() -> None:
    policy = with_overrides(default_policy(), {"clustering": {"enabled": False},
                                               "compaction": {"max_delta_files": 3, "min_interval_hours": 0}})
    run = simulate(_start(), _pattern(list(range(0, 60, 10))), SIZES, policy, Schedule(600, 3600),
                   start_ms=T + 60 * MIN, end_ms=T + 6 * HOUR)
    assert all(s.files["L1"] == s.files["L2"] == 0 for s in run.samples)
    assert run.samples[-1].files["base"] == 2 and run.samples[-1].tasks["compact"] > 0
    assert run.samples[-1].maintenance_written > 0


def test_with_no_retention_every_replaced_file_is_reclaimed_at_the_next_pass() -> None:
    policy = with_overrides(default_policy(), {"clustering": {"level1": {"min_files": 2}}})
    run = simulate(_start(retain_hours=0), _pattern(list(range(0, 60, 10))), SIZES, policy, Schedule(600, 1800),
                   start_ms=T + 60 * MIN, end_ms=T + 3 * HOUR)
    last = run.samples[-1]
    assert last.reclaimed_bytes > 0 and last.history_bytes == 0
    assert last.history_hours == 0  # the last reclamation pass was at this very sample


@given(base=st.integers(0, 10_000), ups=st.lists(st.integers(1, 1000), min_size=1, max_size=8),
       dels=st.integers(0, 500), overlap=st.floats(0, 1))
def test_a_compaction_estimate_keeps_between_zero_and_every_row(base: int, ups: list[int], dels: int,
                                                                 overlap: float) -> None:
    files = [AddFile(path="b", bucket=0, kind="base", level=None, rows=base, bytes=base * 10, min_version=0,
                     max_version=0, min_commit_time=0, max_commit_time=0)] if base else []
    files += [AddFile(path=f"d{i}", bucket=0, kind="delta", level=0, rows=n + dels, bytes=n * 10, min_version=i + 1,
                      max_version=i + 1, min_commit_time=0, max_commit_time=0, delete_rows=dels)
              for i, n in enumerate(ups)]
    sizes = SizeModel(overhead={}, upsert_row_bytes=10, delete_row_bytes=5, merge={}, base=Line(100, 10),
                      key_overlap=overlap)
    rows = sizes.compact_rows(files)
    assert 0 <= rows <= base + sum(ups)
    out = sizes.compact(files)
    assert (out is None) == (rows == 0)
    cluster = sizes.cluster(files[-2:], 1)
    assert cluster.rows == sum(f.rows for f in files[-2:]) and cluster.level == 1


def test_a_fitted_line_recovers_a_line_and_refuses_what_cannot_pin_one_down() -> None:
    line = fit_line([100, 200, 400], [1100, 2100, 4100])
    assert line is not None and line.fixed == pytest.approx(100) and line.slope == pytest.approx(10)
    assert fit_line([100, 101, 102], [1, 2, 3]) is None  # too little spread
    assert fit_line([100, 200], [1, 2]) is None  # too few points
