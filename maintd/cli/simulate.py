"""``maintd simulate``: what would these policies do to this table over the next days? Nothing is written.

The table's write pattern is learned from its log and replayed forward through the real planner once per
candidate policy (:mod:`maintd.simulate`); the predictions are printed side by side, as JSON, or drawn. The
maintenance cadence comes from, in order: ``--maintenance-interval``/``--reclamation-interval``, the daemon's
recorded runs of the table (read from its state store when ``--config`` or ``--store`` is given), the settings'
``scheduler`` group. ``--backtest`` simulates the table's recent past instead and shows how close the
simulation came to what really happened.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from maintd.cli._output import fail, load_cli_settings, print_json, user_errors

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table as RichTable

if TYPE_CHECKING:
    from maintd.simulate import (
        BacktestReport,
        RecordedRun,
        Schedule,
        SimulationReport,
    )
    from maintd.table import Table

RUNS_LIMIT = 2000
"""Most recorded runs of each kind read from the state store (newest first)."""


def register(app: typer.Typer) -> None:
    """Add ``maintd simulate`` to the root app."""
    app.command("simulate")(simulate_command)


def simulate_command(
    uri: str = typer.Argument(..., help="Table URI."),
    policies: list[Path] = typer.Option([], "--policy", help="Candidate policy YAML; repeat to compare several "
                                                             "(default: the packaged default policy)."),
    days: int = typer.Option(7, "--days", help="Days to simulate, from now (1 to 366)."),
    json_out: bool = typer.Option(False, "--json", help="Print the predictions as JSON."),
    plot: Path | None = typer.Option(None, "--plot", help="Draw files per level and amplification over time: FILE.png "
                                                         "(needs the plot extra, maintd\\[plot]) or FILE.html."),
    learn_hours: float = typer.Option(24.0, "--learn-hours", help="Hours of writes, back from the newest, to learn "
                                                                  "the pattern from (and to backtest)."),
    config: Path | None = typer.Option(None, "--config", help="Settings YAML: its scheduler intervals, and its state "
                                                              "store's recorded runs of the table."),
    store: str | None = typer.Option(None, "--store", help="State store URL whose recorded runs of the table give "
                                                           "the cadence (default: the --config store)."),
    maintenance_interval: float | None = typer.Option(None, "--maintenance-interval",
                                                      help="Seconds between maintenance passes (overrides the rest)."),
    reclamation_interval: float | None = typer.Option(None, "--reclamation-interval",
                                                      help="Seconds between reclamation passes (overrides the rest)."),
    backtest_past: bool = typer.Option(False, "--backtest", help="Simulate the last --learn-hours of the table's "
                                                                 "history and compare with what really happened."),
) -> None:
    """Predict files per level, read and write amplification, maintenance work and history kept under each
    policy, from the table's own write pattern; writes nothing."""
    from rich.console import Console
    from rich.markup import escape

    from maintd.planner import load_policy_file
    from maintd.simulate import (
        CandidatePolicy,
        backtest,
        learn,
        simulate_table,
        write_plot,
    )
    from maintd.simulate.simulator import unique_names
    from maintd.table import Table

    with user_errors():
        _check_arguments(days, plot, learn_hours, maintenance_interval, reclamation_interval, backtest_past)
        policy_files = [(p.stem, load_policy_file(p)) for p in policies] or [("default", load_policy_file(None))]
        load_cli_settings(config)  # the warehouse's object-store options, before the table is opened
        table = Table.open(uri)
        schedule = _schedule(table, config, store, maintenance_interval, reclamation_interval)
        snap = table.snapshot()
        md = snap.metadata
        names = unique_names(n for n, _ in policy_files)
        candidates = []
        for name, (_, pf) in zip(names, policy_files, strict=True):
            resolved = pf.resolve(name=md.name or "", uri=table.uri, properties=md.properties)
            candidates.append(CandidatePolicy(name, resolved.name, resolved.policy))
        if backtest_past:
            err = Console(stderr=True, soft_wrap=True, highlight=False)
            learned = learn(table, hours=learn_hours, from_window_start=True)
            reports = []
            for i, c in enumerate(candidates, 1):
                err.print(f"backtesting policy {c.name} ({i} of {len(candidates)})", markup=False)
                reports.append(backtest(table, c, schedule, learned=learned))
        else:
            with _progress(len(candidates), days) as step:
                report = simulate_table(table, candidates, days=days, schedule=schedule, now=datetime.now(UTC),
                                        hours=learn_hours, progress=step)
            if plot is not None:
                write_plot(report, plot)
    console = Console(soft_wrap=True)
    if backtest_past:
        if json_out:
            print_json([r.model_dump(mode="json") for r in reports])
        else:
            print_backtests(console, reports)
        return
    if json_out:
        print_json(report.model_dump(mode="json"))
    else:
        print_report(console, report)
    if plot is not None:
        sys.stdout.flush()
        Console(stderr=True).print(f"plot written to {escape(str(plot))}", highlight=False)


PLAIN_STEP = 0.1
"""Share of a policy's simulated time between two progress lines when stderr is not a terminal."""


@contextmanager
def _progress(policies: int, days: int) -> Iterator[Callable[[str, float], None]]:
    """Progress on stderr while policies are simulated: a bar on a terminal, else a line per policy at every
    tenth of its simulated days (a log or a CI job shows the command is alive, and how far it got)."""
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
    err = Console(stderr=True, soft_wrap=True, highlight=False)
    if not err.is_terminal:
        started = time.monotonic()
        shown: dict[str, int] = {}

        def line(name: str, share: float) -> None:
            tenth = min(int(share / PLAIN_STEP + 1e-9), int(1 / PLAIN_STEP))
            if shown.get(name, -1) < tenth:
                shown[name] = tenth
                err.print(f"simulating policy {name}: {tenth * PLAIN_STEP:.0%} of {days} day(s) "
                          f"({time.monotonic() - started:.0f} s)", markup=False)

        yield line
        return
    with Progress(TextColumn("simulating {task.description}"), BarColumn(), TimeElapsedColumn(), console=err,
                  transient=True) as bar:
        task = bar.add_task("", total=policies)
        done: dict[str, float] = {}

        def step(name: str, share: float) -> None:
            done[name] = share
            bar.update(task, completed=sum(done.values()), description=name)

        yield step


def _check_arguments(days: int, plot: Path | None, learn_hours: float, maintenance: float | None,
                     reclamation: float | None, backtest_past: bool) -> None:
    """Every bad argument is reported before anything is read."""
    from maintd.simulate import (
    check_days,
    plot_format,
    require_matplotlib,
    )

    check_days(days)
    if learn_hours <= 0:
        fail(f"--learn-hours {learn_hours:g} must be positive: the hours of writes to learn the pattern from")
    for flag, value in (("--maintenance-interval", maintenance), ("--reclamation-interval", reclamation)):
        if value is not None and value <= 0:
            fail(f"{flag} {value:g} must be a positive number of seconds")
    if plot is not None:
        if backtest_past:
            fail("--plot draws a simulation of the future; it cannot be combined with --backtest")
        if plot_format(plot) == "png":
            require_matplotlib()


def _schedule(table: Table, config: Path | None, store: str | None, maintenance: float | None,
              reclamation: float | None) -> Schedule:
    """The cadence: explicit intervals, else recorded runs (with --config/--store), else the settings."""
    from maintd.settings import config_file
    from maintd.simulate import (
        Schedule,
        schedule_from_runs,
    )

    settings = load_cli_settings(config)
    s = settings.scheduler
    source = f"settings {config_file(config)}" if config_file(config) is not None else "default settings"
    schedule = Schedule(s.maintenance_interval_seconds, s.reclamation_interval_seconds, source)
    if config is not None or store is not None:
        schedule = schedule_from_runs(_recorded_runs(table, store or settings.store.url, settings), schedule)
    if maintenance is not None or reclamation is not None:
        schedule = Schedule(maintenance or schedule.maintenance_interval_s,
                            reclamation or schedule.reclamation_interval_s, "--maintenance/--reclamation-interval")
    return schedule


def _recorded_runs(table: Table, url: str, settings: Any) -> list[RecordedRun]:
    """The daemon's runs of the table (under any of the names it may be registered by), as plain values."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    from maintd.service.records import RunKind
    from maintd.service.store import StateStore
    from maintd.simulate import (
        RecordedRun,
    )

    try:
        parsed = make_url(url)
    except ArgumentError:
        fail(f"state store URL {url!r} is not a database URL; give e.g. sqlite:///var/lib/maintd/maintd.db")
    database = parsed.database if parsed.get_backend_name() == "sqlite" else None
    if database and database != ":memory:" and not Path(database).expanduser().is_file():
        fail(f"no state store at {database}: point --store or --config at the daemon's store, or leave both out "
             "to use the scheduler settings")
    db = StateStore(url, db_schema=settings.store.db_schema, connect_timeout=settings.store.connect_timeout_seconds,
                    create=False)
    try:
        runs = []
        for name in dict.fromkeys([table.uri, table.uri.removeprefix("file://")]):
            for kind in RunKind:
                runs += db.history(name, kind=kind, limit=RUNS_LIMIT)
    finally:
        db.close()
    return [RecordedRun(kind=str(r.kind), started_ms=int(r.started_at.timestamp() * 1000)) for r in runs]


# -- output --------------------------------------------------------------------------------------------------------

def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def _tasks(tasks: dict[str, int]) -> str:
    return f"{tasks.get('cluster', 0)} / {tasks.get('compact', 0)}"


def _levels(files: dict[str, Any]) -> str:
    from maintd.simulate import (
    LEVELS,
    )

    return " / ".join(f"{files[k]:g}" for k in LEVELS)


def _span(values: list[float], fmt: str) -> str:
    lo, hi = min(values), max(values)
    return format(lo, fmt) if format(lo, fmt) == format(hi, fmt) else f"{lo:{fmt}} to {hi:{fmt}}"


def print_report(console: Console, r: SimulationReport) -> None:
    """The header (what was learned, the cadence), the policies side by side, then one line per day."""
    from rich.markup import escape

    from maintd.units import fmt_bytes

    p = r.pattern
    console.print(f"[bold]{escape(r.table_uri)}[/bold]: {r.days} day(s) simulated from {r.start:%Y-%m-%d %H:%M} UTC, "
                  f"acid.data.retain.hours {r.retain_hours}", highlight=False)
    console.print(f"learned from {p.period_hours:.1f} h of writes ({p.window_start:%Y-%m-%d %H:%M} to "
                  f"{p.window_end:%Y-%m-%d %H:%M} UTC): {p.commits} commits ({p.commits_per_hour:.1f}/h) into "
                  f"{p.buckets_written} bucket(s), {fmt_bytes(p.bytes_per_hour)}/h, {p.rows_per_hour:,.0f} rows/h, "
                  f"delete share {p.delete_share:.2f}, key overlap {p.key_overlap:.2f} "
                  f"({p.sources.get('key_overlap', '?')}), {p.merges_observed} merge(s) observed", highlight=False)
    if p.buckets:
        b = p.buckets
        console.print(f"per bucket: {_span([x.commits_per_hour for x in b], '.1f')} commits/h, "
                      f"{_span([x.rows_per_commit for x in b], ',.0f')} rows per commit, delete share "
                      f"{_span([x.delete_share for x in b], '.2f')}, key overlap "
                      f"{_span([x.key_overlap for x in b], '.2f')} (--json lists every bucket)", highlight=False)
    console.print(f"maintenance every {r.schedule.maintenance_interval_seconds:g} s, reclamation every "
                  f"{r.schedule.reclamation_interval_seconds:g} s ({escape(r.schedule.source)})", highlight=False)
    console.print(_summary(r))
    console.print(_per_day(r))


def _summary(r: SimulationReport) -> RichTable:
    from rich.markup import escape
    from rich.table import Table as RichTable

    from maintd.units import fmt_bytes

    t = RichTable(title=f"after {r.days} day(s)", show_edge=False, title_justify="left")
    t.add_column("")
    for pol in r.policies:
        t.add_column(escape(pol.name), justify="right")
    rows: list[tuple[str, list[str]]] = [
        ("policy source", [escape(p.source) for p in r.policies]),
        ("files L0 / L1 / L2 / base", [_levels(p.days[-1].files) for p in r.policies]),
        ("  mean over the last day", [_levels(p.days[-1].files_mean) for p in r.policies]),
        ("read amplification (max)", [f"{p.days[-1].read_amplification:.2f} ({p.days[-1].read_amplification_max})"
                                      for p in r.policies]),
        ("write amplification", [_pct(p.write_amplification) for p in r.policies]),
        ("tasks cluster / compact", [_tasks(p.maintenance_tasks) for p in r.policies]),
        ("bytes read / written", [f"{fmt_bytes(p.maintenance_bytes_read)} / {fmt_bytes(p.maintenance_bytes_written)}"
                                  for p in r.policies]),
        ("reclaimable (day's peak)", [fmt_bytes(p.days[-1].reclaimable_bytes_max) for p in r.policies]),
        ("reclaimed", [fmt_bytes(sum(d.reclaimed_bytes for d in p.days)) for p in r.policies]),
        ("history kept (h)", [f"{p.days[-1].history_hours:.1f} to {p.days[-1].history_hours_max:.1f}"
                              for p in r.policies]),
        ("history bytes", [fmt_bytes(p.days[-1].history_bytes) for p in r.policies]),
        ("oldest DeltaFile row (h)", [f"{p.days[-1].oldest_delta_hours:.1f}" for p in r.policies]),
    ]
    for label, cells in rows:
        t.add_row(label, *cells)
    return t


def _per_day(r: SimulationReport) -> RichTable:
    from rich.markup import escape
    from rich.table import Table as RichTable

    from maintd.units import fmt_bytes

    t = RichTable(title="per day (files and read amplification: means over the day)", show_edge=False,
                  title_justify="left")
    for col in ("day", "policy", "files L0 / L1 / L2 / base", "read amp.", "write amp.", "tasks", "rewritten"):
        t.add_column(col, justify="left" if col == "policy" else "right")
    for i in range(r.days):
        for k, p in enumerate(r.policies):
            d = p.days[i]
            t.add_row(str(i + 1) if k == 0 else "", escape(p.name),
                      _levels({lvl: round(v, 1) for lvl, v in d.files_mean.items()}),
                      f"{d.read_amplification_mean:.2f}", _pct(d.write_amplification), _tasks(d.maintenance_tasks),
                      fmt_bytes(d.maintenance_bytes_read), end_section=k == len(r.policies) - 1 and i < r.days - 1)
    return t


def print_backtests(console: Console, reports: list[BacktestReport]) -> None:
    """Per policy: predicted vs real files per level per day and at the end, with the error."""
    from rich.markup import escape
    from rich.table import Table as RichTable
    for b in reports:
        console.print(f"[bold]{escape(b.table_uri)}[/bold] under [bold]{escape(b.policy)}[/bold]: "
                      f"{b.hours:.1f} h from {escape(b.start)}; maintenance every "
                      f"{b.schedule.maintenance_interval_seconds:g} s ({escape(b.schedule.source)})", highlight=False)
        t = RichTable(show_edge=False)
        for col in ("", "predicted L0 / L1 / L2 / base", "real", "error"):
            t.add_column(col, justify="right" if col else "left")
        for c in (*b.days, b.final):
            t.add_row(escape(c.label), _levels({k: round(v, 1) for k, v in c.predicted.items()}),
                      _levels({k: round(v, 1) for k, v in c.actual.items()}),
                      "-" if c.error is None else f"{c.error:.0%}")
        console.print(t)
        console.print(f"hourly samples: mean error {_pct(b.mean_error)}, largest {_pct(b.max_error)} "
                      "(error: sum of |predicted - real| over the levels / real files)", highlight=False)
