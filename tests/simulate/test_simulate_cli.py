"""``maintd simulate``: policies side by side, JSON, plots, and one clear line for every bad input."""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.acero  # imported before freezegun swaps datetime.date, which its C module checks on import
import pytest
from freezegun import freeze_time
from typer.testing import CliRunner

from maintd.cli import app
from maintd.simulate import SimulationReport
from maintd.table import Table

T0 = datetime(2024, 5, 1, tzinfo=UTC)
FAST = "default:\n  clustering:\n    level1: {min_files: 3, max_age_hours: 0.5}\n"


@pytest.fixture(scope="module")
def table_uri(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Three hours of writes every ten minutes: upserts of new and existing keys, and some deletes."""
    uri = str(tmp_path_factory.mktemp("sim") / "events")
    with freeze_time(T0) as clock:
        t = Table.create(uri, "id:int64!,v:string", primary_key="id", buckets=2)
        for i in range(18):
            clock.tick(timedelta(minutes=10))
            ids = list(range(i * 20, i * 20 + 30))
            t.upsert(pa.table({"id": ids, "v": [f"v{k}" for k in ids]}))
            if i % 3 == 2:
                t.delete(pa.table({"id": ids[:5]}))
    return uri


@pytest.fixture(scope="module")
def policies(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("policies")
    (root / "fast.yaml").write_text(FAST)
    (root / "lazy.yaml").write_text("default:\n  clustering: {enabled: false}\n  compaction: {enabled: false}\n")
    return root / "fast.yaml", root / "lazy.yaml"


def _run(*args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(app, ["simulate", *args])
    return r.exit_code, r.stdout, r.stderr


def _quick(*args: str) -> tuple[int, str, str]:
    """A simulation with hourly maintenance passes (twelve times fewer plans than the daemon's default)."""
    r = CliRunner().invoke(app, ["simulate", *args, "--maintenance-interval", "3600"])
    return r.exit_code, r.stdout, r.stderr


def test_without_a_policy_the_packaged_default_is_simulated(table_uri: str) -> None:
    code, out, _ = _run(table_uri, "--days", "1", "--json")
    assert code == 0
    report = SimulationReport.model_validate_json(out)
    (only,) = report.policies
    assert only.name == "default" and only.source.startswith("default.yaml")
    assert report.pattern.commits == 24 and report.pattern.buckets_written == 2
    assert report.pattern.delete_share > 0 and report.pattern.sources["key_overlap"] == "sample"


def test_progress_goes_to_stderr_line_by_line_off_a_terminal(table_uri: str, policies: tuple[Path, Path]) -> None:
    code, out, err = _quick(table_uri, "--days", "2", "--policy", str(policies[0]), "--json")
    assert code == 0 and SimulationReport.model_validate_json(out)  # stdout stays the report alone
    lines = err.splitlines()
    steps = [line for line in lines if line.startswith(f"simulating policy {policies[0].stem}: ")]
    assert [s.split(": ")[1].split(" of")[0] for s in steps] == [f"{p}%" for p in range(0, 101, 10)]
    assert all("of 2 day(s)" in s for s in steps)


def test_policies_are_predicted_side_by_side_per_day(table_uri: str, policies: tuple[Path, Path]) -> None:
    fast, lazy = policies
    code, out, _ = _quick(table_uri, "--policy", str(fast), "--policy", str(lazy), "--days", "2", "--json")
    assert code == 0
    report = json.loads(out)
    assert [p["name"] for p in report["policies"]] == ["fast", "lazy"]
    for p in report["policies"]:
        assert [d["day"] for d in p["days"]] == [1, 2]
        for key in ("files", "files_mean", "read_amplification", "write_amplification", "maintenance_tasks",
                    "maintenance_bytes_read", "maintenance_bytes_written", "reclaimable_bytes", "history_hours"):
            assert key in p["days"][0]
    by = {p["name"]: p for p in report["policies"]}
    assert sum(by["lazy"]["maintenance_tasks"].values()) == 0 and by["lazy"]["write_amplification"] == 0
    assert by["fast"]["maintenance_tasks"]["cluster"] > 0 and by["fast"]["write_amplification"] > 0
    assert by["lazy"]["days"][1]["files"]["L0"] > by["fast"]["days"][1]["files"]["L0"]
    assert by["lazy"]["days"][1]["read_amplification"] > by["fast"]["days"][1]["read_amplification"]
    code, text, _ = _quick(table_uri, "--policy", str(fast), "--policy", str(lazy), "--days", "2")
    assert code == 0
    assert "fast" in text and "lazy" in text and "after 2 day(s)" in text and "write amplification" in text


def test_the_same_policy_file_twice_gets_two_names(table_uri: str, policies: tuple[Path, Path]) -> None:
    code, out, _ = _quick(table_uri, "--policy", str(policies[0]), "--policy", str(policies[0]), "--days", "1",
                          "--json")
    assert code == 0
    report = json.loads(out)
    assert [p["name"] for p in report["policies"]] == ["fast", "fast#2"]
    assert report["policies"][0]["days"] == report["policies"][1]["days"]  # the same policy, the same future


def test_the_html_plot_is_one_self_contained_page(table_uri: str, policies: tuple[Path, Path], tmp_path: Path) -> None:
    out = tmp_path / "plot.html"
    code, _, err = _quick(table_uri, "--policy", str(policies[0]), "--policy", str(policies[1]), "--days", "1",
                          "--plot", str(out))
    assert code == 0 and "plot written" in err
    page = out.read_text()
    assert page.count("<svg") == 4  # files per level of each policy, read and write amplification
    assert "<script" not in page and "<link" not in page and "@import" not in page
    assert page.replace('xmlns="http://www.w3.org/2000/svg"', "").count("http") == 0  # nothing fetched


def test_the_png_plot_is_drawn_with_matplotlib(table_uri: str, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    out = tmp_path / "plot.png"
    code, _, _ = _quick(table_uri, "--days", "1", "--plot", str(out))
    assert code == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_png_plot_without_matplotlib_names_the_extra(table_uri: str, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now raises ImportError
    code, out, err = _run(table_uri, "--days", "1", "--plot", str(tmp_path / "p.png"))
    assert code == 2 and not out
    assert len(err.strip().splitlines()) == 1 and "maintd[plot]" in err and ".html" in err
    assert not (tmp_path / "p.png").exists()


@pytest.mark.parametrize(("args", "expected"), [
    (["{missing}"], "no table at"),
    (["{uri}", "--policy", "{bad_policy}"], "invalid policy"),
    (["{uri}", "--policy", "{missing}.yaml"], "cannot read policy file"),
    (["{uri}", "--days", "0"], "--days 0 is out of range"),
    (["{uri}", "--days", "-2"], "--days -2 is out of range"),
    (["{uri}", "--plot", "{tmp}/plot.svg"], "unknown plot format '.svg'"),
    (["{uri}", "--plot", "{tmp}/plot"], "unknown plot format '(no extension)'"),
    (["{uri}", "--learn-hours", "0"], "--learn-hours 0 must be positive"),
    (["{uri}", "--maintenance-interval", "-5"], "--maintenance-interval -5 must be a positive"),
    (["{empty}"], "has no writes in its retained history"),
    (["{uri}", "--store", "sqlite:///{tmp}/no-such.db"], "no state store at"),
    (["{uri}", "--store", "not a url"], "is not a database URL"),
])
def test_bad_input_gets_one_clear_line_and_exit_code_2(table_uri: str, tmp_path: Path, args: list[str],
                                                       expected: str) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("default:\n  clustering:\n    level1: {min_files: 1}\n")
    empty = str(tmp_path / "empty")
    Table.create(empty, "id:int64!,v:string", primary_key="id", buckets=2)
    values = {"uri": table_uri, "missing": str(tmp_path / "nothing-here"), "bad_policy": str(bad),
              "tmp": str(tmp_path), "empty": empty}
    code, out, err = _run(*[a.format(**values) for a in args])
    assert code == 2, (out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and expected in lines[0], err
    assert not out
    assert not (tmp_path / "no-such.db").exists()  # a missing store is reported, never created


def test_a_burst_of_writes_is_not_replayed_for_days(tmp_path: Path) -> None:
    uri = str(tmp_path / "burst")
    with freeze_time(T0):  # commits one millisecond apart: a week of such bursts would be over a billion files
        t = Table.create(uri, "id:int64!,v:string", primary_key="id", buckets=2)
        for i in range(3):
            t.upsert(pa.table({"id": [i, i + 10], "v": ["a", "b"]}))
    code, out, err = _run(uri, "--days", "7")
    assert code == 2 and not out
    assert len(err.strip().splitlines()) == 1 and "more than 2,000,000 a simulation handles" in err
