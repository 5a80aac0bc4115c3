"""``maintd status`` and ``maintd history`` read the daemon's state store (SQLite here) and print it."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from maintd.cli import app
from maintd.service.records import Decision, RunKind, RunStatus
from maintd.service.store import StateStore

runner = CliRunner()
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
GOOD, BAD, NEW, OFF = "/wh/good", "/wh/bad", "/wh/new", "/wh/off"


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for key in [k for k in os.environ if k.startswith("MAINTD_")]:
        monkeypatch.delenv(key)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "240")  # rich wraps table cells on narrow consoles


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "maintd.yaml"
    path.write_text(f"state_dir: {tmp_path / 'state'}\n")
    return path


@pytest.fixture
def store(tmp_path: Path, config: Path) -> StateStore:
    """A store as a daemon leaves it: a healthy, a failing, a never-run and a disabled table."""
    s = StateStore(f"sqlite:///{tmp_path / 'state' / 'maintd.db'}")
    s.register_tables([GOOD, BAD, NEW, OFF], source="discovered", now=T0)
    s.set_enabled(OFF, False)
    run = s.start_run(GOOD, RunKind.MAINTENANCE, holder="pod-a:1", now=T0)
    s.record_decisions(run, [Decision("ds=x", 3, "compact", "compaction.max_delta_files", "40 DeltaFiles >= 32")])
    metrics = {"tasks_planned": 2, "tasks_committed": 2, "files_before": 90, "files": 12, "bytes": 3 << 20,
               "bytes_written": 2 << 20, "backlog_files": 5, "backlog_bytes": 1 << 20, "levels": {"L0": {"files": 5}}}
    s.finish_run(run, RunStatus.SUCCEEDED, metrics=metrics, now=T0 + timedelta(seconds=30))
    later = s.start_run(GOOD, RunKind.MAINTENANCE, holder="pod-a:1", now=T0 + timedelta(minutes=5))
    s.finish_run(later, RunStatus.SKIPPED, metrics={"tasks_planned": 0}, now=T0 + timedelta(minutes=5, seconds=1))
    reclaim = s.start_run(GOOD, RunKind.RECLAIM, holder="pod-b:7", now=T0 + timedelta(minutes=6))
    reclaimed = {"oldest_retained_version": 40, "versions_expired": 3, "log_files_deleted": 3, "data_files_deleted": 7,
                 "data_bytes_deleted": 1 << 20, "orphan_files_deleted": 0, "dry_run": False}
    s.finish_run(reclaim, RunStatus.SUCCEEDED, metrics=reclaimed, now=T0 + timedelta(minutes=7))
    failed = s.start_run(BAD, RunKind.MAINTENANCE, holder="pod-a:1", now=T0)
    s.finish_run(failed, RunStatus.FAILED, error="PolicyError: table bad: key clustering.level1.min_files",
                 retry_after=T0 + timedelta(hours=1), now=T0 + timedelta(seconds=1))
    s.acquire_leases("pod-b:7", [GOOD], 3600, 1)
    return s


def invoke(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_status_json_shows_health_layout_backlog_last_runs_and_lease_of_every_table(
    store: StateStore, config: Path
) -> None:
    code, out, err = invoke("status", "--config", str(config), "--json")
    assert code == 0, err
    doc = json.loads(out)
    rows = {row["uri"]: row for row in doc["tables"]}
    assert {uri: row["health"] for uri, row in rows.items()} == {
        GOOD: "healthy", BAD: "failing", NEW: "new", OFF: "disabled"}
    good = rows[GOOD]
    assert (good["files"], good["backlog_files"], good["backlog_bytes"]) == (12, 5, 1 << 20), "from the last layout"
    assert good["last_maintenance"]["status"] == "skipped" and good["last_reclaim"]["status"] == "succeeded"
    assert good["leased_by"] == "pod-b:7"
    assert rows[BAD]["consecutive_failures"] == 1 and "PolicyError" in rows[BAD]["last_maintenance"]["error"]
    assert doc["summary"] == {"tables": 4, "by_health": {"healthy": 1, "failing": 1, "new": 1, "disabled": 1},
                              "backlog_files": 5, "backlog_bytes": 1 << 20, "leased": 1,
                              "roots": 0, "roots_failing": 0}


def test_status_text_names_the_failing_table_and_its_error(store: StateStore, config: Path) -> None:
    code, out, _ = invoke("status", "--config", str(config))
    assert code == 0
    assert "4 table(s): 1 disabled, 1 failing, 1 healthy, 1 new" in out
    assert f"{BAD}: maintenance failed: PolicyError" in " ".join(out.split())


def test_status_without_a_store_says_how_to_get_one_and_creates_nothing(config: Path, tmp_path: Path) -> None:
    code, _, err = invoke("status", "--config", str(config))
    assert code == 2
    assert "no state store at" in err and "maintd daemon" in err
    assert not (tmp_path / "state" / "maintd.db").exists()


def test_status_of_an_empty_store_says_no_tables(config: Path, tmp_path: Path) -> None:
    StateStore(f"sqlite:///{tmp_path / 'state' / 'maintd.db'}").close()
    code, out, _ = invoke("status", "--config", str(config))
    assert code == 0 and "no tables registered yet" in out


def test_history_lists_runs_newest_first_filtered_by_table_and_limited(store: StateStore, config: Path) -> None:
    code, out, err = invoke("history", "--config", str(config), "--json")
    assert code == 0, err
    runs = json.loads(out)
    assert [r["id"] for r in runs] == sorted((r["id"] for r in runs), reverse=True) and len(runs) == 4
    code, out, _ = invoke("history", GOOD, "--config", str(config), "--json", "--limit", "2")
    runs = json.loads(out)
    assert [(r["table"], r["kind"], r["status"]) for r in runs] == [
        (GOOD, "reclaim", "succeeded"), (GOOD, "maintenance", "skipped")]
    assert "decisions" not in runs[0]


def test_history_filters_by_kind_and_status(store: StateStore, config: Path) -> None:
    code, out, _ = invoke("history", "--config", str(config), "--json", "--kind", "maintenance", "--status", "failed")
    assert code == 0
    assert [(r["table"], r["error"][:11]) for r in json.loads(out)] == [(BAD, "PolicyError")]


def test_history_explain_shows_the_decisions_of_each_run(store: StateStore, config: Path) -> None:
    code, out, _ = invoke("history", GOOD, "--config", str(config), "--json", "--explain", "--kind", "maintenance")
    assert code == 0
    skipped, succeeded = json.loads(out)
    assert skipped["decisions"] == []
    assert succeeded["decisions"] == [{"partition": "ds=x", "bucket": 3, "action": "compact",
                                       "rule": "compaction.max_delta_files", "message": "40 DeltaFiles >= 32"}]
    code, out, _ = invoke("history", GOOD, "--config", str(config), "--explain", "--kind", "maintenance")
    text = " ".join(out.split())
    assert "ds=x bucket 3: compact (compaction.max_delta_files): 40 DeltaFiles >= 32" in text
    assert "nothing to do" in text and "2/2 task(s), 90 -> 12 file(s), 2.0 MiB written" in text


def test_history_says_what_a_reclamation_expired_and_deleted(store: StateStore, config: Path) -> None:
    code, out, _ = invoke("history", GOOD, "--config", str(config), "--kind", "reclaim")
    assert code == 0
    assert "3 version(s) expired (oldest retained 40), deleted 3 log, 7 data, 0 orphan file(s), 1.0 MiB" in " ".join(
        out.split())


def test_history_of_a_table_without_runs_says_so(store: StateStore, config: Path) -> None:
    code, out, _ = invoke("history", NEW, "--config", str(config))
    assert code == 0 and f"no runs recorded for {NEW}" in out


def test_history_rejects_an_unknown_status(store: StateStore, config: Path) -> None:
    code, _, err = invoke("history", "--config", str(config), "--status", "exploded")
    assert code == 2 and "exploded" in err


def test_a_table_only_ever_checked_is_healthy_with_its_checks(store: StateStore, config: Path) -> None:
    from maintd.service.records import CheckRecord

    checked = T0 + timedelta(minutes=9)
    store.record_checks("pod-c:3", [CheckRecord(NEW, RunKind.MAINTENANCE, checked, checks=12, planned=1,
                                                found_nothing=True)])
    result = runner.invoke(app, ["status", "--json", "--config", str(config)])
    assert result.exit_code == 0, result.output
    row = next(t for t in json.loads(result.output)["tables"] if t["uri"] == NEW)
    assert row["health"] == "healthy", "a check that found nothing is no run, but the table was maintained"
    assert (row["checks"], row["checks_planned"], row["checked_by"]) == (12, 1, "pod-c:3")
    assert row["checked_at"].startswith("2026-03-01T12:09")
