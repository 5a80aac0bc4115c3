"""``maintd purge`` and ``maintd gc``: confirmation, dry runs, partitions, and the audit commit."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest
from reclaim_helpers import History, build, data_files_on_disk, orphan, rows
from typer.testing import CliRunner

from maintd import Table, VersionNotFoundError
from maintd.cli import app
from maintd.reclaim import purge_table

HOUR = timedelta(hours=1)
runner = CliRunner()


@pytest.fixture
def history(tmp_path: Path) -> History:
    """Ten versions with overwrites of partition a (tombstones there), deletes in b, retention 168 h."""
    return build(tmp_path / "t", [HOUR] * 10, retain_hours=168)


def files_of(root: Path, partition: str) -> set[str]:
    return {p for p in data_files_on_disk(root) if p.startswith(f"ds={partition}/")}


def test_purge_refuses_to_run_unattended_without_yes_and_changes_nothing(history: History) -> None:
    root = Path(history.table.uri)
    before = (data_files_on_disk(root), history.table.version)

    result = runner.invoke(app, ["purge", str(root)])

    assert result.exit_code == 2
    assert "without confirmation" in result.output and "--yes" in result.output
    assert (data_files_on_disk(root), Table.open(str(root)).version) == before


def test_purge_asks_on_a_terminal_where_no_changes_nothing_and_yes_purges(history: History,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    root = Path(history.table.uri)
    before = data_files_on_disk(root)
    monkeypatch.setattr("maintd.cli._output.stdin_is_terminal", lambda: True)

    result = runner.invoke(app, ["purge", str(root)], input="n\n")

    assert result.exit_code == 1 and "Purge" in result.output and "cancelled" in result.output
    assert data_files_on_disk(root) == before and Table.open(str(root)).version == history.latest
    confirmed = runner.invoke(app, ["purge", str(root)], input="y\n")
    assert confirmed.exit_code == 0, confirmed.output
    assert Table.open(str(root)).version == history.latest + 1 and data_files_on_disk(root) < before


def test_purge_dry_run_lists_what_it_would_delete_and_deletes_nothing(history: History) -> None:
    root = Path(history.table.uri)
    before = data_files_on_disk(root)
    gone = sorted(before - set(history.table.snapshot().files))

    result = runner.invoke(app, ["purge", str(root), "--dry-run"])

    assert result.exit_code == 0, result.output
    assert f"{len(gone)} data files" in result.output and all(p in result.output for p in gone[:20])
    assert f"ends time travel to {history.latest + 1} older version(s)" in result.output
    assert data_files_on_disk(root) == before and Table.open(str(root)).version == history.latest


def test_purge_with_yes_drops_all_history_and_is_audited_in_the_table_history(history: History) -> None:
    root = Path(history.table.uri)
    live = set(history.table.snapshot().files)
    old = orphan(root, history.times[history.latest], hours=100)

    result = runner.invoke(app, ["purge", str(root), "--yes", "--json"])

    assert result.exit_code == 0, result.output
    report = json.loads(result.output[result.output.index("{"):])
    purged = report["purge_version"]
    assert purged == history.latest + 1 and report["orphan_files_deleted"] == 1 and not old.exists()
    assert data_files_on_disk(root) == live
    table = Table.open(str(root))
    assert rows(table.read()) == history.reads[history.latest]
    with pytest.raises(VersionNotFoundError, match=f"oldest retained version is {purged}"):
        table.read(version=history.latest)
    shown = runner.invoke(app, ["table", "history", str(root), "--json"])
    [audit] = [c for c in json.loads(shown.output) if c["operation"] == "PURGE"]
    assert audit["version"] == purged and "@" in audit["parameters"]["user"]
    assert audit["metrics"]["data_files"] == report["data_files_deleted"] and audit["data_change"] is False


def test_a_partition_purge_deletes_only_that_partitions_history_files(history: History) -> None:
    root = Path(history.table.uri)
    b_before = files_of(root, "b")
    live_a = {p for p in history.table.snapshot().files if p.startswith("ds=a/")}
    assert files_of(root, "a") - live_a, "the history has replaced files in partition a"

    result = runner.invoke(app, ["purge", str(root), "--partition", "ds=a", "--yes"])

    assert result.exit_code == 0, result.output
    assert files_of(root, "a") == live_a and files_of(root, "b") == b_before
    table = Table.open(str(root))
    with pytest.raises(VersionNotFoundError):
        table.read(version=history.latest)  # the log is one for the whole table: time travel ends everywhere
    assert rows(table.read()) == history.reads[history.latest]
    runner.invoke(app, ["gc", str(root)])  # partition b's replaced files go at the next reclamation
    assert data_files_on_disk(root) == set(table.snapshot().files)


def test_purge_names_a_bad_partition_filter(history: History) -> None:
    root = Path(history.table.uri)
    result = runner.invoke(app, ["purge", str(root), "--partition", "region=eu", "--yes"])
    assert result.exit_code == 2 and "region is not a partition column" in result.output and "ds" in result.output
    twice = runner.invoke(app, ["purge", str(root), "--partition", "ds=a", "--partition", "ds=b", "--yes"])
    assert twice.exit_code == 2 and "names a column twice" in twice.output
    assert Table.open(str(root)).version == history.latest


def test_purge_from_python_keeps_a_writers_young_files(history: History) -> None:
    root = Path(history.table.uri)
    young = orphan(root, history.times[history.latest], hours=0.5)
    report = purge_table(history.table, now=history.times[history.latest])
    assert young.exists() and report.orphans_within_grace == 1 and report.orphan_files_deleted == 0


def test_gc_dry_run_and_json_report_what_retention_frees(tmp_path: Path) -> None:
    history = build(tmp_path / "t", [HOUR] * 8, retain_hours=0)
    root = Path(history.table.uri)
    before = data_files_on_disk(root)

    dry = runner.invoke(app, ["gc", str(root), "--dry-run", "--json"])

    assert dry.exit_code == 0, dry.output
    [planned] = json.loads(dry.output)
    assert planned["dry_run"] and planned["oldest_retained_version"] == history.latest
    assert planned["data_files_deleted"] == len(before - set(history.table.snapshot().files)) > 0
    assert data_files_on_disk(root) == before

    text = runner.invoke(app, ["gc", str(root), "--dry-run"])
    assert text.exit_code == 0 and "would delete" in text.output

    done = runner.invoke(app, ["gc", str(root), "--json"])
    [report] = json.loads(done.output)
    assert not report["dry_run"] and report["data_files_deleted"] == planned["data_files_deleted"]
    assert report["versions_expired"] == history.latest and report["log_files_deleted"] >= history.latest
    assert data_files_on_disk(root) == set(history.table.snapshot().files)


def test_gc_refuses_a_missing_table_before_reclaiming_anything(history: History, tmp_path: Path) -> None:
    version = history.table.version
    result = runner.invoke(app, ["gc", str(tmp_path / "nope"), history.table.uri])
    assert result.exit_code == 2 and "no table at" in result.output  # bad input, as everywhere
    assert Table.open(history.table.uri).version == version  # nothing expired in the other table


def test_gc_refuses_a_short_grace_unless_forced(history: History) -> None:
    refused = runner.invoke(app, ["gc", history.table.uri, "--orphan-grace-hours", "0.5"])
    assert refused.exit_code == 2 and "below 1 hour" in refused.output
    forced = runner.invoke(app, ["gc", history.table.uri, "--orphan-grace-hours", "0.5", "--force-short-grace"])
    assert forced.exit_code == 0, forced.output
