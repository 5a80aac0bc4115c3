"""``maintd tune``: the cheapest policy that meets a table's targets, found by simulation. Nothing is changed.

Targets come from the table's policy (a policy file's ``target`` section, table properties
``maintd.target.*``), with ``--target NAME=VALUE`` over them. The table's write pattern is learned once and the
policy knobs and the maintenance interval are searched with the simulator (:mod:`maintd.simulate.tune`). The
tuned policy is printed beside the current one with the trade-off curve and why, as JSON, written as a policy
file the daemon and ``maintd simulate`` load, or drawn.
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from maintd.cli._output import fail, load_cli_settings, print_json, print_table, user_errors

if TYPE_CHECKING:
    from rich.console import Console

    from maintd.simulate.tune import TuneResult

TIME_BUDGET_S = 45.0
"""Default seconds the search may take (learning the pattern and printing come on top)."""


def register(app: typer.Typer) -> None:
    """Add ``maintd tune`` to the root app."""
    app.command("tune")(tune_command)


def tune_command(
    uri: str = typer.Argument(..., help="Table URI."),
    target: list[str] = typer.Option([], "--target", help="NAME=VALUE, repeatable: read_files_per_bucket, "
                                                          "merge_delay_minutes, write_amplification (over the "
                                                          "table's own targets)."),
    days: int = typer.Option(7, "--days", help="Days to simulate each candidate over, from now (1 to 366)."),
    json_out: bool = typer.Option(False, "--json", help="Print the result as one JSON document."),
    write: Path | None = typer.Option(None, "--write", help="Write the tuned policy as a policy file: FILE.yaml."),
    plot: Path | None = typer.Option(None, "--plot", help="Draw the trade-off curve: FILE.png (maintd\\[plot]) or "
                                                          "FILE.html (a self-contained page)."),
    policy: Path | None = typer.Option(None, "--policy", help="The current policy file (default: packaged)."),
    maintenance_interval: float | None = typer.Option(None, "--maintenance-interval",
                                                      help="Current seconds between maintenance passes "
                                                           "(default: the settings' scheduler)."),
    time_budget: float = typer.Option(TIME_BUDGET_S, "--time-budget", help="Most seconds the search takes."),
    config: Path | None = typer.Option(None, "--config", help="Settings YAML (scheduler intervals, storage)."),
) -> None:
    """Search the policy knobs and the maintenance interval for the cheapest policy (least bytes rewritten) that
    meets every target, and show it beside the current one; writes nothing unless --write is given."""
    from rich.console import Console
    from rich.markup import escape

    from maintd.execution.cpus import usable_cpus
    from maintd.planner import load_policy_file
    from maintd.planner.targets import TARGET_NAMES, parse_target_args
    from maintd.simulate import Schedule, check_days
    from maintd.simulate.tune import tune_table
    from maintd.simulate.tune_plot import check_tune_plot, write_tune_plot
    from maintd.table import Table

    with user_errors():
        check_days(days)
        if time_budget <= 0:
            fail(f"--time-budget {time_budget:g} must be a positive number of seconds")
        if maintenance_interval is not None and maintenance_interval <= 0:
            fail(f"--maintenance-interval {maintenance_interval:g} must be a positive number of seconds")
        if plot is not None:
            check_tune_plot(plot)
        parse_target_args(target)  # a bad --target is reported before the table is read
        pf = load_policy_file(policy)
        settings = load_cli_settings(config)
        table = Table.open(uri)
        md = table.snapshot().metadata
        current = pf.resolve(name=md.name or "", uri=table.uri, properties=md.properties).policy
        targets = parse_target_args(target, base=current.target)
        if not targets.any():
            fail(f"table {table.uri}: no target declared; give one or more --target NAME=VALUE "
                 f"({', '.join(TARGET_NAMES)}), or set table properties maintd.target.<name>")
        s = settings.scheduler
        schedule = Schedule(maintenance_interval or s.maintenance_interval_seconds, s.reclamation_interval_seconds,
                            "settings")
        result = tune_table(table, targets, current, days=days, now_ms=int(datetime.now(UTC).timestamp() * 1000),
                            time_budget_s=time_budget, schedule=schedule, workers=usable_cpus())
        if write is not None:
            write_policy_file(write, result, name=md.name or table.uri)
        if plot is not None:
            write_tune_plot(result, plot, f"maintd tune {table.uri}: {days} day(s)")
    if json_out:
        print_json(result_json(table.uri, result))
    else:
        print_result(Console(soft_wrap=True), table.uri, result)
    for what, where in (("policy file", write), ("plot", plot)):
        if where is not None:
            sys.stdout.flush()
            Console(stderr=True).print(f"{what} written to {escape(str(where))}", highlight=False)


def glob_literal(text: str) -> str:
    """``text`` as a glob that matches only itself (``[``, ``*`` and ``?`` bracketed)."""
    return "".join(f"[{c}]" if c in "[*?" else c for c in text)


def file_overrides(result: TuneResult) -> dict[str, Any]:
    """The tuned policy as overrides of the packaged defaults (targets included): the file alone rebuilds it."""
    from maintd.planner import default_policy
    from maintd.simulate.search import diff

    tuned = result.policy.model_dump(mode="json")
    return diff(tuned, default_policy().model_dump(mode="json"))


def write_policy_file(path: Path, result: TuneResult, *, name: str) -> None:
    """A policy file with one ``tables:`` rule for this table; the interval is a daemon setting, so a comment."""
    import yaml

    from maintd.planner import parse_policy

    head = (f"# Written by maintd tune for {name}: the cheapest policy found that "
            f"{'meets' if result.meets else 'comes closest to'} its targets.\n"
            f"# {result.reason}\n"
            f"# Maintenance interval chosen: {result.interval_seconds:g} s; it is the daemon's setting "
            f"scheduler.maintenance_interval_seconds (every table), not a policy knob.\n")
    body = yaml.safe_dump({"tables": [{"match": glob_literal(name), "overrides": file_overrides(result)}]},
                          sort_keys=False)
    text = head + body
    parse_policy(text, str(path))  # never write a file the loader would refuse
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as e:
        fail(f"--write {path}: cannot write the policy file: {e.strerror or e}")


def result_json(uri: str, r: TuneResult) -> dict[str, Any]:
    """One document with stable keys."""
    return {
        "table_uri": uri, "days": r.days, "targets": dict(r.targets.declared()), "meets": r.meets,
        "binding": list(r.binding), "reason": r.reason,
        "current": {"interval_seconds": r.current_interval_seconds, "predicted": r.current_predicted,
                    "runs": r.current_runs},
        "tuned": {"interval_seconds": r.interval_seconds, "predicted": r.predicted, "runs": r.runs,
                  "overrides": r.overrides, "policy": r.policy.model_dump(mode="json")},
        "curve": [{"read_files_per_bucket": a, "write_amplification": b, "bytes_rewritten": c, "label": d}
                  for a, b, c, d in r.curve],
        "evaluated": r.evaluated, "complete": r.complete,
    }


def _fmt(name: str, v: float) -> str:
    from maintd.units import fmt_bytes

    if name == "bytes_rewritten":
        return fmt_bytes(int(v))
    return f"{v:.2f}" if name == "write_amplification" else f"{v:g}"


def print_result(console: Console, uri: str, r: TuneResult) -> None:
    """Current vs tuned per target, the changed knobs, the curve, and why."""
    from rich.markup import escape
    from rich.table import Table as RichTable

    from maintd.planner.targets import TARGET_NAMES

    console.print(f"[bold]{escape(uri)}[/bold]: {r.evaluated} policies simulated over {r.days} day(s)"
                  + ("" if r.complete else " (the time budget ended the search before it converged: "
                                           "give it more with --time-budget)"), highlight=False)
    declared = r.targets.declared()
    t = RichTable(show_edge=False)
    for col in ("", "target", "current", "tuned", "met?"):
        t.add_column(col, justify="left" if not col else "right")
    for n in TARGET_NAMES:
        goal = declared.get(n)
        met = "-" if goal is None else ("yes" if r.predicted[n] <= goal + 1e-9 else "NO")
        t.add_row(n, "-" if goal is None else f"<= {goal:g}", _fmt(n, r.current_predicted[n]),
                  _fmt(n, r.predicted[n]), met)
    t.add_row("bytes rewritten", "least", _fmt("bytes_rewritten", r.current_predicted["bytes_rewritten"]),
              _fmt("bytes_rewritten", r.predicted["bytes_rewritten"]), "")
    t.add_row("maintenance runs", "", str(r.current_runs), str(r.runs), "")
    t.add_row("interval (s)", "", f"{r.current_interval_seconds:g}", f"{r.interval_seconds:g}", "")
    print_table(console, t)
    console.print("changed knobs: " + (_flat(r.overrides) or "none"), highlight=False, markup=False)
    c = RichTable(title="trade-off curve (read against write amplification)", show_edge=False, title_justify="left")
    for col in ("read files/bucket", "write amp.", "rewritten", "policy"):
        c.add_column(col, justify="left" if col == "policy" else "right")
    for a, b, by, label in r.curve:
        c.add_row(f"{a:g}", f"{b:.2f}", _fmt("bytes_rewritten", by), escape(label))
    print_table(console, c)
    console.print(f"why: {r.reason}", highlight=False, markup=False)
    if not r.complete:
        console.print("search: cut by the time budget; the figures are the best found, not the best possible",
                      highlight=False, markup=False)
    if r.binding:
        console.print(f"binds: {', '.join(r.binding)}", highlight=False, markup=False)


def _flat(tree: dict[str, Any], prefix: str = "") -> str:
    parts = []
    for k, v in tree.items():
        if isinstance(v, dict):
            parts.append(_flat(v, f"{prefix}{k}."))
        else:
            parts.append(f"{prefix}{k}={v}")
    return ", ".join(p for p in parts if p)

