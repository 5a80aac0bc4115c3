"""``maintd tune``: text, JSON, the written policy file (loaded by ``simulate --policy`` and the policy loader),
the plot, and one clear line for every bad input."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.acero  # imported before freezegun swaps datetime.date, which its C module checks on import
import pytest
from freezegun import freeze_time
from typer.testing import CliRunner

from maintd.cli import app
from maintd.planner import load_policy_file
from maintd.table import Table

T0 = datetime(2024, 5, 1, tzinfo=UTC)
QUICK = ["--days", "1", "--maintenance-interval", "3600", "--time-budget", "4"]


@pytest.fixture(scope="module")
def table_uri(tmp_path_factory: pytest.TempPathFactory) -> str:
    uri = str(tmp_path_factory.mktemp("tune") / "events")
    with freeze_time(T0) as clock:
        t = Table.create(uri, "id:int64!,v:string", primary_key="id", buckets=2)
        for i in range(18):
            clock.tick(timedelta(minutes=10))
            ids = list(range(i * 20, i * 20 + 30))
            t.upsert(pa.table({"id": ids, "v": [f"v{k}" for k in ids]}))
    return uri


def _run(*args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(app, ["tune", *args])
    return r.exit_code, r.stdout, r.stderr


def test_text_shows_current_and_tuned_per_target_the_curve_and_why(table_uri: str) -> None:
    code, out, _ = _run(table_uri, "--target", "read_files_per_bucket=4", *QUICK)
    assert code == 0, out
    assert "read_files_per_bucket" in out and "<= 4" in out and "trade-off curve" in out and "why: " in out


def test_json_is_one_document_with_stable_keys(table_uri: str) -> None:
    code, out, _ = _run(table_uri, "--target", "merge_delay_minutes=90", "--json", *QUICK)
    assert code == 0
    doc = json.loads(out)
    assert set(doc) == {"table_uri", "days", "targets", "meets", "binding", "reason", "current", "tuned", "curve",
                        "evaluated", "complete"}
    assert doc["targets"] == {"merge_delay_minutes": 90.0}
    assert set(doc["tuned"]["predicted"]) == {"read_files_per_bucket", "merge_delay_minutes", "write_amplification",
                                              "bytes_rewritten"}


def test_the_written_policy_file_loads_in_simulate_and_the_policy_loader(table_uri: str, tmp_path: Path) -> None:
    out_file = tmp_path / "tuned.yaml"
    code, out, err = _run(table_uri, "--target", "read_files_per_bucket=3", "--json", "--write", str(out_file), *QUICK)
    assert code == 0, err
    doc = json.loads(out)
    resolved = load_policy_file(out_file).resolve(uri=table_uri)
    assert resolved.policy.model_dump(mode="json") == doc["tuned"]["policy"]
    assert resolved.policy.target.read_files_per_bucket == 3
    r = CliRunner().invoke(app, ["simulate", table_uri, "--policy", str(out_file), "--days", "1",
                                 "--maintenance-interval", "3600", "--json"])
    assert r.exit_code == 0, r.stderr


def test_the_png_plot_is_drawn(table_uri: str, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    png = tmp_path / "curve.png"
    code, _, _ = _run(table_uri, "--target", "read_files_per_bucket=4", "--plot", str(png), *QUICK)
    assert code == 0 and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_html_plot_is_a_self_contained_page(table_uri: str, tmp_path: Path) -> None:
    page = tmp_path / "curve.html"
    code, _, err = _run(table_uri, "--target", "read_files_per_bucket=4", "--plot", str(page), *QUICK)
    assert code == 0, err
    text = page.read_text()
    assert text.startswith("<!DOCTYPE html>") and "<svg" in text and "<polyline" in text
    assert "http" not in text.replace('xmlns="http://www.w3.org/2000/svg"', "")  # nothing fetched


def test_a_search_cut_by_its_budget_says_so_in_text_and_json(table_uri: str) -> None:
    cut = ["--days", "1", "--maintenance-interval", "3600", "--time-budget", "0.001"]
    code, out, _ = _run(table_uri, "--target", "read_files_per_bucket=1", *cut)
    assert code == 0
    assert "cut by the time budget" in out and "--time-budget" in out and "no policy" not in out
    code, out, _ = _run(table_uri, "--target", "read_files_per_bucket=1", "--json", *cut)
    doc = json.loads(out)
    assert doc["complete"] is False and doc["binding"] == [] and "no policy" not in doc["reason"]


def test_targets_come_from_the_table_properties(tmp_path: Path, table_uri: str) -> None:
    policy = tmp_path / "p.yaml"
    policy.write_text("default:\n  target: {write_amplification: 50}\n")
    code, out, _ = _run(table_uri, "--policy", str(policy), "--json", *QUICK)
    assert code == 0
    assert json.loads(out)["targets"] == {"write_amplification": 50.0}


@pytest.mark.parametrize(("args", "needle"), [
    (["--target", "speed=3"], "unknown target 'speed'"),
    (["--target", "read_files_per_bucket=0"], "invalid target"),
    (["--target", "read_files_per_bucket"], "give NAME=VALUE"),
    (["--target", "read_files_per_bucket=4", "--days", "0"], "--days 0 is out of range"),
    ([], "no target declared"),
    (["--target", "read_files_per_bucket=4", "--plot", "x.svg"], "unknown plot format"),
])
def test_bad_input_gets_one_clear_line_and_exit_code_2(table_uri: str, args: list[str], needle: str) -> None:
    code, _, err = _run(table_uri, *args, "--days", "1") if "--days" not in args else _run(table_uri, *args)
    assert code == 2
    assert needle in err and err.count("\n") == 1


def test_a_missing_table_is_exit_code_2(tmp_path: Path) -> None:
    code, _, err = _run(str(tmp_path / "nope"), "--target", "read_files_per_bucket=4")
    assert code == 2 and "error:" in err
