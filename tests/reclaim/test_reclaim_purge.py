"""PURGE from Python: its orphan grace, its dry run, its partitions, and the pins it refuses to drop."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pytest
from reclaim_helpers import Clock, data_files_on_disk, local_time_zone, orphan

from maintd import InvalidInputError, PinConflictError, Table
from maintd.reclaim import engine, purge, purge_table
from maintd.table import pins
from maintd.table.log.actions import Unpin
from maintd.table.log.timeline import to_epoch_ms

HOUR = timedelta(hours=1)


def two_partitions(root: Path) -> Table:
    """A table partitioned by ``ds`` whose files of both partitions were all replaced once (tombstones)."""
    table = Table.create(str(root), "id:int64!,name:string,ds:string", primary_key="id", partition_by="ds",
                         buckets=1)
    table.upsert(pa.table({"id": [1, 2], "name": ["x", "x"], "ds": ["a", "b"]}))
    table.overwrite(pa.table({"id": [1, 2], "name": ["y", "y"], "ds": ["a", "b"]}))
    return table


def test_a_purge_refuses_a_grace_below_an_hour_unless_forced(tmp_path: Path) -> None:
    table = two_partitions(tmp_path / "t")
    with pytest.raises(InvalidInputError, match="below 1 hour"):
        purge_table(table, orphan_grace=timedelta(minutes=5), dry_run=True)
    assert purge_table(table, orphan_grace=timedelta(minutes=5), force_short_grace=True, dry_run=True).dry_run


def slow_planning(monkeypatch: pytest.MonkeyPatch, seconds: float) -> None:
    """Planning a PURGE takes ``seconds`` by the monotonic clock of PURGE and of the run it starts."""
    clock, plan = Clock(), purge.plan_purge

    def plan_purge(*args: object, **kwargs: object) -> object:
        clock.now += seconds
        return plan(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(purge, "plan_purge", plan_purge)
    monkeypatch.setattr(purge, "time", clock)
    monkeypatch.setattr(engine, "time", clock)


def test_a_purge_dry_run_measures_the_grace_at_the_time_given_and_keeps_to_the_partitions_asked_for(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    table = two_partitions(tmp_path / "t")
    slow_planning(monkeypatch, 1.23456)
    clock = datetime.now(UTC)
    # half an hour old by the clock, two and a half hours old at ``now``: past a grace of one hour there only
    for ds in ("a", "b"):
        orphan(tmp_path / "t", clock, 0.5, name=ds * 32, where=f"ds={ds}/bucket-00000")
    before = (data_files_on_disk(tmp_path / "t"), table.version)

    report = purge_table(table, now=clock + 2 * HOUR, partitions=[{"ds": "a"}], orphan_grace=HOUR, dry_run=True)

    assert report.dry_run is True and report.operation == "purge" and report.seconds == 1.235
    assert report.orphan_files_deleted == 1 and report.data_files_deleted == 1
    assert [dict(p) for p in report.partitions] == [{"ds": "a"}]
    assert (data_files_on_disk(tmp_path / "t"), Table.open(table.uri).version) == before


def test_a_refused_purge_names_every_pinned_version_and_who_pinned_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    table = two_partitions(tmp_path / "t")
    table.pin(1, 3 * HOUR, "export")
    owner = pins.who()
    monkeypatch.setattr(pins, "who", lambda: "")  # a pin recorded without its owner
    table.pin(2, 3 * HOUR, "audit")
    with pytest.raises(InvalidInputError) as refused:
        purge_table(Table.open(table.uri))
    message = str(refused.value)
    assert "pinned version(s) 1 (pin " in message and " UTC), 2 (pin " in message
    assert message.endswith("; wait for the pins to expire, unpin them (`maintd table unpin`), "
                            "or purge with --force-unpin (force_unpin=True) to remove them")
    assert message.count(" by unknown, until ") == 1 and f" by {owner}, until " in message


def test_a_purge_without_a_time_reads_the_clock_in_utc_whatever_the_local_time_zone(tmp_path: Path) -> None:
    table = two_partitions(tmp_path / "t")
    with local_time_zone("Etc/GMT-5"):  # five hours east of UTC
        report = purge_table(table, dry_run=True)
        planned = purge.plan_purge(table)
    assert abs(to_epoch_ms(report.now) - time.time() * 1000) < 60_000
    assert abs(to_epoch_ms(planned.now) - time.time() * 1000) < 60_000


def test_a_pin_landing_after_the_purge_planned_makes_its_audit_commit_fail_and_nothing_is_deleted(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The pins are checked on the snapshot the purge planned from; one that lands after it is caught by
    the audit commit (it expires every version before itself), before any file goes."""
    table = two_partitions(tmp_path / "t")
    table.unpin(table.pin(2, HOUR).id)  # the table's protocol has pins: a new pin is no protocol change
    plan = purge.plan_purge

    def plan_then_pin(*args: object, **kwargs: object) -> object:
        planned = plan(*args, **kwargs)  # type: ignore[arg-type]
        Table.open(table.uri).pin(1, 3 * HOUR, "a reader starting now")
        return planned

    monkeypatch.setattr(purge, "plan_purge", plan_then_pin)
    before = data_files_on_disk(tmp_path / "t")
    with pytest.raises(PinConflictError):
        purge_table(Table.open(table.uri))
    assert data_files_on_disk(tmp_path / "t") == before


def test_a_purge_reports_its_steps_from_the_audit_commit_on_and_its_time_from_its_start(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    table = two_partitions(tmp_path / "t")
    slow_planning(monkeypatch, 3600.0)
    steps: list[str] = []
    report = purge_table(table, on_step=steps.append)
    assert steps[:2] == ["commit", "checkpoint"] and "data" in steps
    assert report.operation == "purge" and report.seconds == 3600.0


def test_a_commit_landing_right_after_the_audit_commit_keeps_every_file_the_purge_version_reads(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The purge deletes what its own version no longer reads, not what a later commit removed."""
    table = two_partitions(tmp_path / "t")
    audit = purge._audit_commit
    after: list[int] = []

    def audit_then_overwrite(*args: object, **kwargs: object) -> int:
        version = audit(*args, **kwargs)  # type: ignore[arg-type]
        after.append(Table.open(table.uri).overwrite(pa.table({"id": [3], "name": ["z"], "ds": ["a"]})))
        return version

    monkeypatch.setattr(purge, "_audit_commit", audit_then_overwrite)
    report = purge_table(Table.open(table.uri))
    assert after == [report.purge_version + 1]
    reopened = Table.open(table.uri)
    assert sorted(reopened.read(version=report.purge_version).column("name").to_pylist()) == ["y", "y"]


def test_the_audit_commit_records_who_what_and_how_much_and_why_each_pin_went(tmp_path: Path) -> None:
    table = two_partitions(tmp_path / "t")
    pin = table.pin(1, 3 * HOUR, "export")
    orphan(tmp_path / "t", datetime.now(UTC), 100, where="ds=a/bucket-00000")

    report = purge_table(Table.open(table.uri), partitions=[{"ds": "a"}], orphan_grace=2 * HOUR, user="ops@test",
                         force_unpin=True)

    audit = Table.open(table.uri).history(limit=1)[0]
    assert audit.version == report.purge_version and audit.operation == "PURGE"
    assert audit.parameters == {"user": "ops@test", "partitions": [{"ds": "a"}], "orphan_grace_hours": 2.0,
                                "pins_removed": [pin.id]}
    assert audit.metrics == {
        "versions_expired": report.versions_expired, "log_files": report.log_files_deleted,
        "data_files": 1, "data_bytes": report.data_bytes_deleted,
        "orphan_files": 1, "orphan_bytes": report.orphan_bytes_deleted,
    }
    actions = Table.open(table.uri).log.read_commit(audit.version) or []
    assert [(a.id, a.reason) for a in actions if isinstance(a, Unpin)] == [(pin.id, "PURGE --force-unpin by ops@test")]


def test_a_purge_plan_always_writes_a_checkpoint_and_names_the_table_of_a_bad_partition_filter(
        tmp_path: Path) -> None:
    table = two_partitions(tmp_path / "t")
    assert purge.plan_purge(table).checkpoint_needed is True
    with pytest.raises(InvalidInputError, match=f"^table {table.uri}: hour is not a partition column"):
        purge.plan_purge(table, partitions=[{"hour": "1"}])
