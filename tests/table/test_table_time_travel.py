"""Time travel by version and by time, and the edges of retained history."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.acero  # imported before freezegun swaps datetime.date, which its C module checks on import
import pytest
from freezegun import freeze_time

from maintd import InvalidInputError, Table, VersionNotFoundError
from maintd.table.log.tablelog import commit_path

T0 = datetime(2024, 3, 1, 12, 0, tzinfo=UTC)


def _names(table: Table, **kwargs: object) -> dict[int, str]:
    return {r["id"]: r["name"] for r in table.read(**kwargs).to_pylist()}  # type: ignore[arg-type]


def _hourly_table(root: Path, retain_hours: int = 24) -> Table:
    """Versions 1..4 upsert key 1 with name v1..v4, one hour apart starting at T0 + 1h."""
    with freeze_time(T0) as clock:
        table = Table.create(str(root), "id:int64!,name:string", primary_key="id", buckets=2,
                             properties={"acid.data.retain.hours": retain_hours})
        for v in range(1, 5):
            clock.tick(timedelta(hours=1))
            table.upsert(pa.table({"id": [1], "name": [f"v{v}"]}))
    return table


def test_reads_any_retained_version(tmp_path: Path) -> None:
    table = _hourly_table(tmp_path / "t")
    with freeze_time(T0 + timedelta(hours=5)):
        assert _names(table, version=0) == {}
        for v in range(1, 5):
            assert _names(table, version=v) == {1: f"v{v}"}
        assert _names(table) == {1: "v4"}


def test_as_of_reads_the_newest_version_committed_at_or_before_the_time(tmp_path: Path) -> None:
    table = _hourly_table(tmp_path / "t")
    with freeze_time(T0 + timedelta(hours=6)):
        at_v2 = T0 + timedelta(hours=2)
        assert _names(table, as_of=at_v2) == {1: "v2"}
        assert _names(table, as_of=at_v2 - timedelta(milliseconds=1)) == {1: "v1"}
        assert _names(table, as_of=at_v2 + timedelta(minutes=59)) == {1: "v2"}
        assert _names(table, as_of=int(at_v2.timestamp() * 1000)) == {1: "v2"}
        assert _names(table, as_of=at_v2.isoformat()) == {1: "v2"}
        assert _names(table, as_of=T0 + timedelta(days=1)) == {1: "v4"}
        with pytest.raises(VersionNotFoundError, match="no version was committed at or before"):
            table.read(as_of=T0 - timedelta(hours=1))


def test_version_and_as_of_together_are_refused(tmp_path: Path) -> None:
    table = _hourly_table(tmp_path / "t")
    with pytest.raises(InvalidInputError, match="either version or as_of"):
        table.read(version=1, as_of=T0)


def test_a_version_never_written_names_the_latest(tmp_path: Path) -> None:
    table = _hourly_table(tmp_path / "t")
    with pytest.raises(VersionNotFoundError, match="has no version 9; the latest is 4") as caught:
        table.read(version=9)
    assert caught.value.latest == 4
    with pytest.raises(VersionNotFoundError):
        table.read(version=-1)


def test_a_version_older_than_the_retention_window_names_the_oldest_retained(tmp_path: Path) -> None:
    table = _hourly_table(tmp_path / "t", retain_hours=24)
    # at T0 + 26.5h the window starts at T0 + 2.5h, when version 2 (T0 + 2h) was the table's state: versions
    # 2, 3 and 4 are retained, so that every time in the window can be read
    with freeze_time(T0 + timedelta(hours=26, minutes=30)):
        assert _names(table, version=2) == {1: "v2"}
        with pytest.raises(VersionNotFoundError, match="oldest retained version is 2") as caught:
            table.read(version=1)
        assert caught.value.oldest_retained == 2
        with pytest.raises(VersionNotFoundError, match="oldest retained version is 2"):
            table.read(as_of=T0 + timedelta(hours=1))


def test_every_time_inside_the_retention_window_can_be_read(tmp_path: Path) -> None:
    """The version current at the start of the window is retained (Delta Lake's rule): ``as_of`` anywhere in
    the window reads the state of that moment, the window's first minutes included."""
    table = _hourly_table(tmp_path / "t", retain_hours=24)
    now = T0 + timedelta(hours=26, minutes=30)
    with freeze_time(now):
        for minutes in (0, 1, 29, 30, 31, 90, 150):
            at = now - timedelta(hours=24) + timedelta(minutes=minutes)
            expected = min(4, int((at - T0) / timedelta(hours=1)))
            assert _names(table, as_of=at) == {1: f"v{expected}"}, f"as_of window start + {minutes} min"


def test_a_naive_time_means_utc_for_as_of_as_for_retention(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A naive datetime (or an ISO string without offset) is UTC everywhere, whatever the local time zone."""
    import time as _time

    monkeypatch.setenv("TZ", "America/New_York")
    _time.tzset()
    try:
        table = _hourly_table(tmp_path / "t")
        with freeze_time(T0 + timedelta(hours=6)):
            at_v2 = (T0 + timedelta(hours=2, minutes=30)).replace(tzinfo=None)
            assert _names(table, as_of=at_v2) == {1: "v2"}
            assert _names(table, as_of=at_v2.isoformat()) == {1: "v2"}
            assert _names(table, as_of=at_v2.isoformat() + "+00:00") == {1: "v2"}
            assert table.history(1)[0].time == T0 + timedelta(hours=4)
    finally:
        monkeypatch.delenv("TZ")
        _time.tzset()


def test_zero_retention_keeps_only_the_current_version(tmp_path: Path) -> None:
    table = _hourly_table(tmp_path / "t", retain_hours=0)
    with pytest.raises(VersionNotFoundError, match="oldest retained version is 4") as caught:
        table.read(version=3)
    assert caught.value.oldest_retained == 4
    assert _names(table, version=4) == {1: "v4"}


def test_a_version_whose_log_was_reclaimed_names_the_oldest_retained(tmp_path: Path) -> None:
    table = Table.create(str(tmp_path / "t"), "id:int64!,name:string", primary_key="id",
                         properties={"log.checkpoint.interval": 3})
    for v in range(1, 8):
        table.upsert(pa.table({"id": [v], "name": [f"v{v}"]}))
    for v in range(3):  # reclamation removes commits older than a checkpoint
        (tmp_path / "t" / commit_path(v)).unlink()
    reopened = Table.open(str(tmp_path / "t"))
    assert sorted(_names(reopened, version=3)) == [1, 2, 3]
    with pytest.raises(VersionNotFoundError, match="oldest retained version is 3") as caught:
        reopened.read(version=2)
    assert caught.value.oldest_retained == 3
    assert [r.version for r in reopened.history()] == [7, 6, 5, 4, 3]
