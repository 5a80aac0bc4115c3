"""The simulator against reality.

A table is written by a streaming writer and maintained under policy A for 24 hours of simulated time
(freezegun; maintenance with the local executor every 30 minutes, as the daemon's schedule would run it, and
its runs recorded in a state store as the daemon records them). The simulation of that past under A must
predict the files per level that really resulted within 20%, and so must a forecast of the second half of the
day learned from the first half only.

Errors are ``sum(|predicted - actual|) / sum(actual)`` over the L0, L1, L2 and base file counts; the measured
figures are printed (``pytest -s``). The day's mean error (of its hourly samples) is checked per table; the error
of the day's end, one sample of counts that jump with the planner's thresholds (a compaction due or not in one
bucket moves it by a tenth), is checked as the mean over three days written with different seeds: over seeds 1 to
8, a single day's end was off by more than 20% in 1 of the 16 checks (a backtest and a forecast per seed), and in 3
of 16 with the encodings of the version before dictionary-encoded text, while no day's mean error passed 4%.
"""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from maintd.cli import app
from maintd.reclaim import plan_reclamation
from maintd.simulate import (
    CandidatePolicy,
    RecordedRun,
    Schedule,
    backtest,
    learn,
    schedule_from_runs,
    simulate,
)
from maintd.simulate.backtest import compare_with_log
from maintd.table import Snapshot, Table

from .sim_helpers import Maintained, record_runs, write_and_maintain

pytestmark = pytest.mark.slow  # the table is written and maintained for a simulated day first (seconds)

LIMIT = 0.20
INTERVAL_S = 1800.0
NO_RECLAMATION_S = 10 * 24 * 3600.0


@pytest.fixture(scope="module")
def maintained(tmp_path_factory: pytest.TempPathFactory) -> Maintained:
    return write_and_maintain(tmp_path_factory.mktemp("validation"), hours=24, write_every=timedelta(minutes=15),
                              maintain_every=timedelta(seconds=INTERVAL_S), first_pass=timedelta(minutes=7))


@pytest.fixture(scope="module")
def store_url(maintained: Maintained, tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('store') / 'maintd.db'}"
    record_runs(url, maintained.uri, maintained.passes)
    return url


SEEDS = (7, 1, 2)
"""The seeds of the days whose ends are compared on average (7 is :func:`maintained`'s)."""


@pytest.fixture(scope="module")
def days(maintained: Maintained, tmp_path_factory: pytest.TempPathFactory) -> list[Maintained]:
    return [maintained, *(write_and_maintain(tmp_path_factory.mktemp(f"validation-{seed}"), hours=24,
                                             write_every=timedelta(minutes=15),
                                             maintain_every=timedelta(seconds=INTERVAL_S),
                                             first_pass=timedelta(minutes=7), seed=seed) for seed in SEEDS[1:])]


def _recorded(m: Maintained) -> Schedule:
    runs = [RecordedRun("maintenance", int(t.timestamp() * 1000)) for t in m.passes]
    return schedule_from_runs(runs, Schedule(INTERVAL_S, NO_RECLAMATION_S, "test settings"))


def _policy(m: Maintained) -> CandidatePolicy:
    return CandidatePolicy("A", str(m.policy_path), m.policy)


def test_the_simulated_past_under_policy_a_has_the_files_per_level_that_really_resulted(
        days: list[Maintained]) -> None:
    ends = []
    for m in days:
        report = backtest(Table.open(m.uri), _policy(m), _recorded(m))
        print(f"\nbacktest with recorded runs: end {report.final.predicted} vs {report.final.actual} error "
              f"{report.final.error}; day means error {[d.error for d in report.days]}; hourly mean error "
              f"{report.mean_error}, largest {report.max_error}")
        assert report.schedule.source.startswith("recorded maintenance runs")
        assert report.hours == pytest.approx(24, abs=0.01)
        day = report.days[0]
        assert all(day.actual[level] > 0 for level in ("L0", "L1", "L2", "base")), day.actual  # every level seen
        assert all(d.error is not None and d.error <= LIMIT for d in report.days)
        assert report.final.error is not None
        ends.append(report.final.error)
    assert sum(ends) / len(ends) <= LIMIT, ends


def test_without_recorded_runs_the_daemon_interval_alone_predicts_the_day_within_20_percent(
        maintained: Maintained) -> None:
    # the passes' phase is unknown (they really ran 7 minutes past the half hours): only the cadence is right
    report = backtest(Table.open(maintained.uri), _policy(maintained),
                      Schedule(INTERVAL_S, NO_RECLAMATION_S, "the settings' interval"))
    print(f"\nbacktest from the interval alone: day means error {[d.error for d in report.days]}, end error "
          f"{report.final.error}, hourly mean error {report.mean_error}")
    assert all(d.error is not None and d.error <= LIMIT for d in report.days)


def test_a_forecast_learned_from_the_first_12_hours_predicts_the_next_12_within_20_percent(
        days: list[Maintained]) -> None:
    ends = []
    for m in days:
        table = Table.open(m.uri)
        cut = m.start + timedelta(hours=12)
        cut_ms = int(cut.timestamp() * 1000)
        version = max(r.version for r in table.history() if r.timestamp <= cut_ms)
        learned = learn(table, hours=None, until_version=version)  # nothing after the cut is seen
        report = compare_with_log(table, learned, _policy(m), _recorded(m), start_ms=cut_ms,
                                  end_ms=int(m.end.timestamp() * 1000))
        print(f"\nforecast of hours 12-24: mean error {[d.error for d in report.days]}, end {report.final.predicted} "
              f"vs {report.final.actual} error {report.final.error}, hourly mean error {report.mean_error}")
        assert report.hours == pytest.approx(12, abs=0.01)
        assert all(d.error is not None and d.error <= LIMIT for d in report.days)
        assert report.final.error is not None
        ends.append(report.final.error)
    assert sum(ends) / len(ends) <= LIMIT, ends


def test_predicted_reclaimable_bytes_match_what_reclamation_would_delete(maintained: Maintained) -> None:
    table = Table.open(maintained.uri)
    learned = learn(table, hours=None, from_window_start=True)
    end_ms = table.snapshot().timestamp
    run = simulate(learned.start, learned.pattern, learned.sizes, maintained.policy, _recorded(maintained),
                   start_ms=learned.start.timestamp, end_ms=end_ms)
    real = plan_reclamation(table, now=datetime.fromtimestamp(end_ms / 1000, UTC), orphan_grace=timedelta(hours=72))
    real_bytes = sum(f.bytes for f in real.data_files)
    predicted = run.samples[-1].reclaimable_bytes
    print(f"\nreclaimable after 24 h (retain 12 h): predicted {predicted} B, reclamation plans {real_bytes} B")
    assert real_bytes > 0
    assert predicted == pytest.approx(real_bytes, rel=0.05)
    assert run.samples[-1].history_hours == pytest.approx(24, abs=0.1)  # nothing reclaimed yet: all history kept


def test_the_backtest_command_uses_the_runs_the_daemon_recorded(maintained: Maintained, store_url: str) -> None:
    r = CliRunner().invoke(app, ["simulate", maintained.uri, "--policy", str(maintained.policy_path), "--backtest",
                                 "--learn-hours", "48", "--store", store_url, "--json"])
    assert r.exit_code == 0, r.output
    (report,) = json.loads(r.stdout)
    assert report["schedule"]["source"].startswith("recorded maintenance runs")
    assert report["final"]["error"] <= LIMIT
    text = CliRunner().invoke(app, ["simulate", maintained.uri, "--policy", str(maintained.policy_path), "--backtest",
                                    "--learn-hours", "48", "--store", store_url])
    assert text.exit_code == 0, text.output
    assert "predicted" in text.stdout and "recorded maintenance runs" in text.stdout and "error" in text.stdout


def test_the_forward_simulation_uses_the_recorded_cadence(maintained: Maintained, store_url: str,
                                                          tmp_path: Path) -> None:
    r = CliRunner().invoke(app, ["simulate", maintained.uri, "--policy", str(maintained.policy_path), "--days", "1",
                                 "--store", store_url, "--json"])
    assert r.exit_code == 0, r.output
    report = json.loads(r.stdout)
    assert report["schedule"]["maintenance_interval_seconds"] == INTERVAL_S
    assert report["schedule"]["source"].startswith("recorded maintenance runs")


@pytest.fixture(scope="module")
def with_prior_rows(tmp_path_factory: pytest.TempPathFactory) -> Maintained:
    """The same day, in a table whose compactions also store the rows they fold (``changes.prior.rows``)."""
    return write_and_maintain(tmp_path_factory.mktemp("priors"), hours=24, write_every=timedelta(minutes=15),
                              maintain_every=timedelta(seconds=INTERVAL_S), first_pass=timedelta(minutes=7),
                              properties={"changes.prior.rows": True})


def _without_prior_rows(snap: Snapshot) -> Snapshot:
    """``snap`` with ``changes.prior.rows`` taken out of its table's properties."""
    md = snap.metadata
    return dataclasses.replace(snap, metadata=md.model_copy(update={
        "properties": {k: v for k, v in md.properties.items() if k != "changes.prior.rows"}}))


def test_prior_rows_files_are_predicted_as_history_reclaimed_with_their_basefiles(with_prior_rows: Maintained
                                                                                   ) -> None:
    table = Table.open(with_prior_rows.uri)
    snap = table.snapshot()
    real_priors = sum(p.bytes for p in snap.priors.values())
    assert real_priors > 0, "the compactions of the day wrote prior-rows files"
    learned = learn(table, hours=None, from_window_start=True)
    assert learned.sizes.sources["prior"] == "log" and learned.sizes.prior is not None
    end_ms = snap.timestamp
    run = simulate(learned.start, learned.pattern, learned.sizes, with_prior_rows.policy,
                   _recorded(with_prior_rows), start_ms=learned.start.timestamp, end_ms=end_ms)
    real = plan_reclamation(table, now=datetime.fromtimestamp(end_ms / 1000, UTC), orphan_grace=timedelta(hours=72))
    real_bytes = sum(f.bytes for f in real.data_files)
    last = run.samples[-1]
    print(f"\nwith prior rows, after 24 h: prior-rows files {real_priors} B in the log; reclaimable predicted "
          f"{last.reclaimable_bytes} B, reclamation plans {real_bytes} B; history held predicted "
          f"{last.history_bytes} B")
    assert last.reclaimable_bytes == pytest.approx(real_bytes, rel=0.10)

    # the same day without prior-rows files predicted: the difference is about what the log holds
    off = simulate(_without_prior_rows(learned.start), learned.pattern, learned.sizes, with_prior_rows.policy,
                   _recorded(with_prior_rows), start_ms=learned.start.timestamp, end_ms=end_ms).samples[-1]
    held = (last.reclaimable_bytes + last.history_bytes) - (off.reclaimable_bytes + off.history_bytes)
    print(f"prior-rows bytes the simulation holds: {held} B, against {real_priors} B in the log")
    assert held == pytest.approx(real_priors, rel=0.25), (held, real_priors)


def test_prior_rows_bytes_of_hours_12_to_24_are_forecast_from_the_first_12(with_prior_rows: Maintained) -> None:
    from maintd.table.log.actions import CommitInfo, PriorRows

    table = Table.open(with_prior_rows.uri)
    cut_ms = int((with_prior_rows.start + timedelta(hours=12)).timestamp() * 1000)
    end_ms = int(with_prior_rows.end.timestamp() * 1000)
    version = max(r.version for r in table.history() if r.timestamp <= cut_ms)
    learned = learn(table, hours=None, until_version=version)  # nothing after the cut is seen
    real = 0
    for v in range(version + 1, table.version + 1):
        actions = table.log.read_commit(v) or []
        info = next(a for a in actions if isinstance(a, CommitInfo))
        if info.timestamp <= end_ms:
            real += sum(a.bytes for a in actions if isinstance(a, PriorRows))
    runs = [simulate(start, learned.pattern, learned.sizes, with_prior_rows.policy, _recorded(with_prior_rows),
                     start_ms=cut_ms, end_ms=end_ms).samples[-1]
            for start in (learned.start, _without_prior_rows(learned.start))]
    predicted = sum(s.reclaimable_bytes + s.history_bytes + s.reclaimed_bytes for s in runs[:1]) - sum(
        s.reclaimable_bytes + s.history_bytes + s.reclaimed_bytes for s in runs[1:])
    print(f"\nforecast of hours 12-24 with prior rows ({learned.sizes.sources['prior']} line): prior-rows bytes "
          f"predicted {predicted} B, written {real} B")
    assert real > 0
    assert predicted == pytest.approx(real, rel=0.25)
