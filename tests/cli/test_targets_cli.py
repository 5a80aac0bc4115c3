"""``maintd status`` and ``maintd plan --explain`` show the targets the daemon keeps: the measured figures, the
gaps, the last re-tune, and which knobs came from it."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pytest
from typer.testing import CliRunner

from maintd.cli import app
from maintd.service.store import StateStore
from maintd.table import Table

runner = CliRunner()
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for key in [k for k in os.environ if k.startswith("MAINTD_")]:
        monkeypatch.delenv(key)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "240")


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "maintd.yaml"
    path.write_text(f"state_dir: {tmp_path / 'state'}\n")
    return path


@pytest.fixture
def table_uri(tmp_path: Path) -> str:
    uri = str(tmp_path / "orders")
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.string())])
    t = Table.create(uri, schema, "id", buckets=2, name="db.orders",
                     properties={"maintd.target.merge_delay_minutes": "30",
                                 "maintd.clustering.level1.max_age_hours": "2"})
    for i in range(4):
        t.upsert(pa.table({"id": [i, i + 10], "v": [f"v{i}"] * 2}))
    return uri


@pytest.fixture
def store(tmp_path: Path, config: Path, table_uri: str) -> StateStore:
    s = StateStore(f"sqlite:///{tmp_path / 'state' / 'maintd.db'}")
    s.register_tables([table_uri, "/wh/plain"], now=T0)
    s.set_targets({table_uri: {"merge_delay_minutes": 30.0}})
    s.record_tuning(table_uri, overrides={"clustering": {"level1": {"min_files": 2, "max_age_hours": 1.0}}},
                    interval_seconds=150.0, reason="meets merge_delay_minutes at 12.0 min; moved "
                    "clustering.level1.min_files", predicted={"merge_delay_minutes": 12.0},
                    measured={"write_amplification": 1.4}, now=T0)
    s.record_measured({table_uri: ({"merge_delay_minutes": 45.0}, {"merge_delay_minutes": 0.5})}, now=T0)
    return s


def test_status_json_shows_targets_measured_figures_gaps_and_the_last_re_tune(
    store: StateStore, config: Path, table_uri: str
) -> None:
    result = runner.invoke(app, ["status", "--config", str(config), "--json"])
    assert result.exit_code == 0, result.stderr
    rows = {row["uri"]: row for row in json.loads(result.stdout)["tables"]}
    kept = rows[table_uri]["targets"]
    assert kept["targets"] == {"merge_delay_minutes": 30.0} and kept["measured"] == {"merge_delay_minutes": 45.0}
    assert kept["gaps"] == {"merge_delay_minutes": 0.5} and kept["missed"] == ["merge_delay_minutes"]
    assert kept["last_retune"]["at"].startswith("2026-03-01T12:00:00")
    assert kept["last_retune"]["overrides"] == {"clustering": {"level1": {"min_files": 2, "max_age_hours": 1.0}}}
    assert kept["last_retune"]["reason"].startswith("meets merge_delay_minutes")
    assert rows["/wh/plain"]["targets"] is None


def test_status_prints_a_line_per_table_with_targets(store: StateStore, config: Path, table_uri: str) -> None:
    result = runner.invoke(app, ["status", "--config", str(config)])
    assert result.exit_code == 0, result.stderr
    assert f"{table_uri} targets: merge_delay_minutes <= 30: 45 (+50%)" in result.stdout
    assert "re-tuned 03-01 12:00:00: meets merge_delay_minutes at 12.0 min" in result.stdout
    assert "/wh/plain targets" not in result.stdout


def test_plan_explain_names_the_tuned_knobs_when_and_why_and_properties_still_win(
    store: StateStore, config: Path, table_uri: str
) -> None:
    result = runner.invoke(app, ["plan", table_uri, "--explain", "--config", str(config)])
    assert result.exit_code == 0, result.output
    assert "+ tuned + table properties" in result.stdout
    # max_age_hours is an explicit table property: it is not the tuned one
    assert "tuned knobs (re-tuned 2026-03-01T12:00:00+00:00): clustering.level1.min_files=2" in result.stdout
    assert "max_age_hours=1.0" not in result.stdout
    assert "why: meets merge_delay_minutes at 12.0 min" in result.stdout
    assert "targets: merge_delay_minutes <= 30 (measured 45)" in result.stdout
    untuned = runner.invoke(app, ["plan", table_uri, "--explain", "--config", str(config), "--no-tuned"])
    assert untuned.exit_code == 0 and "tuned" not in untuned.stdout


def test_plan_uses_no_tuned_knob_while_tuning_is_off_as_the_daemon_does(
    store: StateStore, config: Path, table_uri: str
) -> None:
    config.write_text(config.read_text() + "tuning:\n  enabled: false\n")
    result = runner.invoke(app, ["plan", table_uri, "--explain", "--config", str(config)])
    assert result.exit_code == 0, result.output
    assert "tuned knobs" not in result.stdout and "+ tuned" not in result.stdout
