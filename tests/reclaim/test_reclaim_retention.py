"""Reclamation by acid.data.retain.hours: what expires, what survives, and that retained reads never change."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace

import pyarrow as pa
import pytest
from freezegun import freeze_time
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reclaim_helpers import T0, Clock, History, build, data_files_on_disk, local_time_zone, orphan, rows

from maintd import InvalidInputError, StorageError, Table, VersionNotFoundError
from maintd.execution import execute
from maintd.execution.commit import commit_rewrites
from maintd.planner import load_policy_file, plan
from maintd.reclaim import engine, plan_reclamation, reclaim_table, retention
from maintd.table.log import timeline
from maintd.table.log.tablelog import checkpoint_path, commit_path
from maintd.table.log.timeline import to_epoch_ms

HOUR = timedelta(hours=1)


def assert_retained_reads_unchanged(history: History, now: datetime, oldest: int) -> None:
    """Every version from ``oldest`` reads as it did; every older one raises naming ``oldest``."""
    table = Table.open(history.table.uri)
    with freeze_time(now):
        for v in range(oldest, history.latest + 1):
            assert rows(table.read(version=v)) == history.reads[v], f"version {v} changed"
        for v in range(0, oldest):
            with pytest.raises(VersionNotFoundError) as err:
                table.read(version=v)
            assert err.value.oldest_retained == oldest and f"oldest retained version is {oldest}" in str(err.value)


def assert_only_retained_files_left(history: History, oldest: int) -> None:
    root = Path(history.table.uri)
    assert data_files_on_disk(root) == history.live_from(oldest)
    log = {p.name for p in (root / "_log").iterdir()}
    assert Path(commit_path(oldest)).name in log and Path(commit_path(oldest - 1)).name not in log
    assert Path(checkpoint_path(oldest)).name in log or oldest == 0


def test_the_version_current_at_the_start_of_the_window_survives_and_the_one_before_it_expires(tmp_path: Path
                                                                                            ) -> None:
    gaps = [HOUR, HOUR, HOUR, timedelta(seconds=2), HOUR]
    history = build(tmp_path / "t", gaps, retain_hours=2)
    now = history.times[3] + 2 * HOUR + timedelta(seconds=1)  # version 3 is 2 h 1 s old, version 4 is 1 h 59 min 59 s

    report = reclaim_table(history.table, now=now)

    # version 3 was the table's state when the window began: it stays, so that as_of(now - 2 h) still reads
    assert report.oldest_retained_version == 3 and report.versions_expired == 3
    assert_retained_reads_unchanged(history, now, 3)
    assert_only_retained_files_left(history, 3)
    with freeze_time(now):
        assert rows(Table.open(history.table.uri).read(as_of=now - 2 * HOUR)) == history.reads[3]


def test_a_version_committed_exactly_at_the_start_of_the_window_is_the_oldest_retained(tmp_path: Path) -> None:
    history = build(tmp_path / "t", [HOUR] * 4, retain_hours=2)
    now = history.times[2] + 2 * HOUR

    assert reclaim_table(history.table, now=now).oldest_retained_version == 2
    assert_retained_reads_unchanged(history, now, 2)


@pytest.mark.parametrize("retain_hours", [0, 1, 24, 168])
def test_retention_keeps_the_versions_of_the_window_and_the_one_current_at_its_start(tmp_path: Path,
                                                                                     retain_hours: int) -> None:
    gaps = [3 * HOUR] * 64 + [timedelta(minutes=20)] * 6  # 194 hours of history, the last two hours denser
    history = build(tmp_path / "t", gaps, retain_hours=retain_hours)
    now = history.times[history.latest] + timedelta(minutes=30)
    oldest = history.oldest_retained(now, retain_hours)
    assert (retain_hours == 0) == (oldest == history.latest)
    before = data_files_on_disk(Path(history.table.uri))

    report = reclaim_table(history.table, now=now)

    assert report.oldest_retained_version == oldest and report.checkpoint_written in (None, oldest)
    assert report.log_files_deleted >= oldest and report.data_files_deleted == len(before - history.live_from(oldest))
    assert_retained_reads_unchanged(history, now, oldest)
    assert_only_retained_files_left(history, oldest)
    again = reclaim_table(Table.open(history.table.uri), now=now)
    assert again.files_deleted == 0 and again.versions_expired == 0


def test_a_new_retention_property_takes_effect_at_the_next_reclamation(tmp_path: Path) -> None:
    history = build(tmp_path / "t", [2 * HOUR] * 30, retain_hours=168)
    now = history.times[history.latest] + HOUR
    assert reclaim_table(history.table, now=now).versions_expired == 0
    with freeze_time(now):
        changed = history.table.set_properties({"acid.data.retain.hours": 5})
        history.times[changed], history.reads[changed] = now, history.reads[changed - 1]

    report = reclaim_table(history.table, now=now)

    assert report.retain_hours == 5 and report.oldest_retained_version == history.oldest_retained(now, 5)
    assert_retained_reads_unchanged(history, now, report.oldest_retained_version)


def test_delta_files_the_current_state_needs_survive_until_a_compaction_frees_them(tmp_path: Path) -> None:
    """Three days of upserts and no compaction: retention expires the log but no live file; the planner
    then compacts under retention pressure, and the next reclamation deletes the old DeltaFiles."""
    with freeze_time(T0) as clock:
        table = Table.create(str(tmp_path / "t"), "id:int64!,name:string", primary_key="id", buckets=2)
        for i in range(12):
            clock.tick(6 * HOUR)
            table.upsert(pa.table({"id": [i % 5, 100 + i], "name": [f"n{i}", "x"]}))
        now = datetime.now(UTC) + 2 * HOUR
    live = set(table.snapshot().files)
    with freeze_time(now):
        expected = rows(table.read())

    with freeze_time(now):  # reclamation's expire commit takes the clock's time
        first = reclaim_table(table, now=now)
    assert first.versions_expired > 0 and first.data_files_deleted == 0
    assert data_files_on_disk(tmp_path / "t") == live

    maintenance = plan(table.snapshot(), load_policy_file(None).resolve(uri=table.uri).policy, now,
                       table.uri)
    assert {t.kind for t in maintenance.tasks} == {"compact"}
    assert {d.rule for d in maintenance.decisions} == {"compaction.retention_pressure"}
    with freeze_time(now):
        outcome = commit_rewrites(table, maintenance, execute(maintenance, table))
    assert outcome.version is not None and not outcome.failed

    later = now + 25 * HOUR
    with freeze_time(later):
        second = reclaim_table(table, now=later)
    assert second.data_files_deleted == len(live)
    assert data_files_on_disk(tmp_path / "t") == set(table.snapshot().files)
    with freeze_time(later):
        assert rows(table.read()) == expected


def test_orphans_go_only_once_older_than_the_grace_and_unknown_files_stay(tmp_path: Path) -> None:
    history = build(tmp_path / "t", [HOUR] * 6)
    root = Path(history.table.uri)
    now = history.times[history.latest] + HOUR
    young = orphan(root, now, hours=71, name="b" * 32)  # a writer may still commit it
    old = orphan(root, now, hours=73, name="c" * 32)
    stray_tmp = orphan(root, now, hours=80, name="d" * 32, where="_log")
    stray_tmp = stray_tmp.rename(root / "_log" / ".tmp-0123")
    notes = root / "ds=a" / "README.txt"
    notes.write_text("the user's own file")

    dry = reclaim_table(history.table, now=now, dry_run=True)
    assert (dry.orphan_files_deleted, dry.orphans_within_grace, dry.unknown_files_kept) == (2, 1, 1)
    assert old.exists() and stray_tmp.exists()

    report = reclaim_table(history.table, now=now)

    assert report.orphan_files_deleted == 2 and report.orphans_within_grace == 1
    assert young.exists() and notes.exists() and not old.exists() and not stray_tmp.exists()
    assert_retained_reads_unchanged(history, now, report.oldest_retained_version)


def test_a_grace_below_one_hour_is_refused_unless_forced(tmp_path: Path) -> None:
    history = build(tmp_path / "t", [HOUR])
    with pytest.raises(InvalidInputError, match="below 1 hour"):
        reclaim_table(history.table, orphan_grace=timedelta(minutes=59))
    with pytest.raises(InvalidInputError, match="negative"):
        reclaim_table(history.table, orphan_grace=timedelta(hours=-1), force_short_grace=True)
    assert reclaim_table(history.table, orphan_grace=timedelta(minutes=5), force_short_grace=True).dry_run is False


def test_an_uncommitted_writers_files_survive_reclamation_and_then_commit(tmp_path: Path) -> None:
    history = build(tmp_path / "t", [HOUR] * 4, retain_hours=0)
    table = history.table
    snap = table.snapshot()
    txn = table.new_transaction("UPSERT", read_snapshot=snap)
    from maintd.table.files.writer import prepare_changes, split_and_write

    batch = prepare_changes(pa.table({"id": [77], "name": ["late"], "ds": ["b"]}), None, snap.metadata, table=table.uri)
    for add in split_and_write(table.storage, snap.metadata, batch):  # written, not committed yet
        txn.add(add)

    report = reclaim_table(table, orphan_grace=timedelta(hours=1))

    assert report.orphans_within_grace == 1 and report.orphan_files_deleted == 0
    txn.commit()
    assert {"id": 77, "name": "late", "ds": "b"} in rows(Table.open(table.uri).read())


def test_a_reader_holding_an_old_snapshot_still_loads_retained_versions_after_the_log_goes(tmp_path: Path) -> None:
    history = build(tmp_path / "t", [HOUR] * 25, retain_hours=3)
    reader = Table.open(history.table.uri)
    reader.snapshot(2)  # a long-lived process caches an early snapshot and replays from it
    now = history.times[history.latest] + HOUR
    oldest = reclaim_table(history.table, now=now).oldest_retained_version
    assert oldest > 12

    with freeze_time(now):
        assert rows(reader.read(version=oldest + 1)) == history.reads[oldest + 1]


def test_the_plan_lists_what_a_reclamation_then_deletes(tmp_path: Path) -> None:
    history = build(tmp_path / "t", [HOUR] * 12, retain_hours=4)
    now = history.times[history.latest] + HOUR
    planned = plan_reclamation(history.table, now=now)
    assert planned.checkpoint_needed and planned.versions_expired == planned.oldest_retained_version
    assert all(not (Path(history.table.uri) / f.path).exists() or f.bytes > 0 for f in planned.data_files)

    report = reclaim_table(history.table, now=now)

    assert (report.log_files_deleted, report.data_files_deleted) == (len(planned.log_files), len(planned.data_files))
    assert not any((Path(history.table.uri) / f.path).exists() for f in planned.log_files + planned.data_files)


@pytest.mark.slow
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(gaps=st.lists(st.integers(1, 20 * 60), min_size=3, max_size=24),
       retain=st.sampled_from([0, 1, 2, 6]),
       runs=st.lists(st.integers(0, 30 * 60), min_size=1, max_size=3))
def test_any_history_reclaimed_at_any_times_keeps_every_retained_read(tmp_path_factory: pytest.TempPathFactory,
                                                                      gaps: list[int], retain: int,
                                                                      runs: list[int]) -> None:
    """Random commit spacing (minutes), retention and reclamation times: retained versions never change."""
    history = build(tmp_path_factory.mktemp("t") / "t", [timedelta(minutes=g) for g in gaps], retain_hours=retain,
                    interval=4)
    now = history.times[history.latest]
    for later in sorted(runs):
        at = now + timedelta(minutes=later)
        report = reclaim_table(Table.open(history.table.uri), now=at)
        oldest = history.oldest_retained(at, retain)
        assert report.oldest_retained_version == oldest
        assert_retained_reads_unchanged(history, at, oldest)
        assert data_files_on_disk(Path(history.table.uri)) == history.live_from(oldest)


def test_a_plan_without_a_time_reads_the_clock_in_utc_whatever_the_local_time_zone(tmp_path: Path) -> None:
    table = Table.create(str(tmp_path / "t"), "id:int64!", primary_key="id", buckets=1)
    with local_time_zone("Etc/GMT-5"):  # five hours east of UTC
        planned = plan_reclamation(table)
    assert abs(to_epoch_ms(planned.now) - datetime.now(UTC).timestamp() * 1000) < 60_000


def test_a_reclamation_reports_its_time_from_its_start_planning_included(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    table = Table.create(str(tmp_path / "t"), "id:int64!", primary_key="id", buckets=1)
    clock, plan = Clock(), retention.plan_reclamation

    def slow_plan(*args: object, **kwargs: object) -> object:
        clock.now += 3600.0
        return plan(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(retention, "plan_reclamation", slow_plan)
    monkeypatch.setattr(retention, "time", clock)
    monkeypatch.setattr(engine, "time", clock)
    assert reclaim_table(table).seconds == 3600.0


def test_a_plan_gives_up_after_the_log_changed_under_three_plans_in_a_row(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    table = Table.create(str(tmp_path / "t"), "id:int64!", primary_key="id", buckets=1)
    listings: list[int] = []

    def list_files(t: Table) -> engine.Listed:
        listings.append(1)
        return engine.list_files(t)

    # the commit of the planned floor is gone whenever the plan looks it up (another run reclaimed it)
    gone = SimpleNamespace(oldest_retained_version=timeline.oldest_retained_version, commit_time=lambda *a: None)
    monkeypatch.setattr(retention, "list_files", list_files)
    monkeypatch.setattr(retention, "timeline", gone)
    with pytest.raises(StorageError) as err:
        plan_reclamation(table)
    assert str(err.value) == (f"table {table.uri}: the log changed under three reclamation plans in a row; "
                              "retry later")
    assert len(listings) == 3
