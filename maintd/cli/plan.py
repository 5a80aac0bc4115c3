"""``maintd plan``: print the maintenance plan of tables, and with ``--explain`` why each bucket is (not) worked on.

Planning reads the table log only; nothing is written. One table's failure (missing table, bad policy
override) is reported and the other tables are still planned; the exit code is 2 if a table is missing or its
input is bad (a policy override), else 1 if any failed (README, "Exit codes").
"""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from maintd.cli._output import load_cli_settings, print_table
from maintd.errors import MaintdError

if TYPE_CHECKING:
    from rich.console import Console

if TYPE_CHECKING:
    from maintd.planner import MaintenancePlan, PolicyFile
    from maintd.service.records import TuningRecord


def register(app: typer.Typer) -> None:
    """Add ``maintd plan`` to the root app."""
    app.command("plan")(plan_command)


def plan_command(
    uris: list[str] = typer.Argument(..., help="Table URIs to plan."),
    policy: Path | None = typer.Option(None, "--policy", help="Policy YAML file (default: the packaged defaults)."),
    explain: bool = typer.Option(False, "--explain", help="Show every bucket, with the rule that decided it."),
    json_out: bool = typer.Option(False, "--json", help="Print each plan as one JSON line (a MaintenancePlan)."),
    show_policy: bool = typer.Option(False, "--show-policy", help="Print each table's effective policy as YAML."),
    config: Path | None = typer.Option(
        None, "--config", help="Settings YAML whose state store holds the knobs the daemon tuned (default: "
        "$MAINTD_CONFIG, then config/maintd.yaml)."),
    tuned: bool = typer.Option(True, "--tuned/--no-tuned", help="Plan with the knobs the daemon tuned to the "
                               "table's targets, as the daemon does (read from its state store when there is one)."),
) -> None:
    """Plan clustering and compaction of tables and print the plan; writes nothing."""
    from rich.console import Console
    from rich.markup import escape

    from maintd.planner import load_policy_file

    out, err = Console(soft_wrap=True), Console(stderr=True, soft_wrap=True)
    settings = load_cli_settings(config)  # the warehouse's object-store options, and the daemon's store
    try:
        policy_file = load_policy_file(policy)
    except MaintdError as exc:
        err.print(f"[red]error:[/red] {escape(str(exc))}")
        raise typer.Exit(2) from None
    now = datetime.now(UTC)
    records = tuning_records(settings, uris) if tuned else {}
    codes = {uri: _plan_one(uri, policy_file, now, out, err, explain=explain, json_out=json_out,
                            show_policy=show_policy, tuning=records.get(uri)) for uri in uris}
    failed = [uri for uri, code in codes.items() if code]
    if failed:
        if len(uris) > 1:
            err.print(f"[red]planning failed for {len(failed)} table(s):[/red] {escape(', '.join(failed))}")
        raise typer.Exit(max(codes.values()))


def tuning_records(settings: Any, uris: list[str]) -> dict[str, TuningRecord]:
    """The daemon's tuning rows of ``uris`` from the state store of ``settings``; none when tuning is off (the
    daemon then plans without tuned knobs) or there is no store to read (a plan made away from the daemon is
    still a plan, with the policy file's knobs). A SQLite store that does not exist is not created, and
    SQLAlchemy is not even imported for it."""
    if not settings.tuning.enabled:
        return {}
    url = str(settings.store.url)
    if url.startswith("sqlite"):
        database = url.split("///", 1)[1].split("?", 1)[0] if "///" in url else ""
        if not database or database == ":memory:" or not Path(database).expanduser().is_file():
            return {}  # no daemon has run here: nothing tuned, and no store to create
    try:
        from maintd.service.store import StateStore

        store = StateStore(url, db_schema=settings.store.db_schema,
                           connect_timeout=settings.store.connect_timeout_seconds, create=False)
    except Exception:  # an unreachable store: plan without tuned knobs
        return {}
    try:
        store.check_schema()
        return store.tuning_records(uris)
    except MaintdError:
        return {}
    finally:
        store.close()


def plan_table(uri: str, policy_file: PolicyFile, now: datetime, *, tuned: dict[str, object] | None = None
               ) -> tuple[MaintenancePlan, str, tuple[str, ...]]:
    """Open a table and plan it with its effective policy (with the daemon's ``tuned`` knobs); returns the plan,
    the policy as YAML and the knobs that came from tuning."""
    from maintd.planner import plan, policy_yaml
    from maintd.table import Table

    table = Table.open(uri)
    snap = table.snapshot()
    md = snap.metadata
    resolved = policy_file.resolve(name=md.name or "", uri=table.uri, properties=md.properties, tuned=tuned)
    made = plan(snap, resolved.policy, now, table.uri, policy_name=resolved.name)
    return made, policy_yaml(resolved.policy), resolved.tuned


def _plan_one(uri: str, policy_file: PolicyFile, now: datetime, out: Console, err: Console, *, explain: bool,
              json_out: bool, show_policy: bool, tuning: TuningRecord | None = None) -> int:
    """Plan and print one table; returns the exit code its outcome calls for (0: planned)."""
    from rich.markup import escape

    from maintd.cli._output import exit_code_for
    try:
        p, pol_yaml, knobs = plan_table(uri, policy_file, now, tuned=tuning.overrides if tuning else None)
    except MaintdError as exc:
        if json_out:
            sys.stdout.write(json.dumps({"table_uri": uri, "error": str(exc)}) + "\n")
        err.print(f"[red]error:[/red] {escape(str(exc))}")
        return exit_code_for(exc)
    if json_out:
        sys.stdout.write(p.model_dump_json() + "\n")
        return 0
    print_plan(out, p, explain=explain)
    if explain and tuning is not None:
        print_tuning(out, tuning, knobs)
    if show_policy:
        out.print(f"[bold]effective policy[/bold] ({escape(p.policy_name)}):")
        out.print(escape(pol_yaml), highlight=False)
    return 0


def print_tuning(console: Console, record: TuningRecord, knobs: tuple[str, ...]) -> None:
    """What ``--explain`` says of the daemon's tuning: which knobs it set, when and why, and the targets."""
    from rich.markup import escape

    when = record.tuned_at.isoformat(timespec="seconds") if record.tuned_at else "never"
    shown = ", ".join(f"{k}={_knob(record.overrides or {}, k)}" for k in knobs) or "none (policy file and properties)"
    console.print(f"  tuned knobs (re-tuned {when}): {escape(shown)}", highlight=False)
    if record.reason:
        console.print(f"      why: {escape(record.reason)}", highlight=False)
    targets = ", ".join(f"{n} <= {v:g} (measured {record.measured.get(n, float('nan')):.4g})"
                        for n, v in record.targets.items())
    console.print(f"      targets: {escape(targets)}", highlight=False)
    if record.error:
        console.print(f"      last re-tune failed: {escape(record.error)}", highlight=False)


def _knob(nested: dict[str, object], path: str) -> object:
    node: object = nested
    for part in path.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


def _where(partition: dict[str, str | None], bucket: int) -> str:
    part = ",".join(f"{k}={v}" for k, v in partition.items())
    return f"{part} bucket {bucket}" if part else f"bucket {bucket}"


EXPLAIN_WIDTH = 100
"""Columns ``--explain`` wraps its reasons to (or the terminal's width, if narrower)."""


def print_plan(console: Console, p: MaintenancePlan, *, explain: bool = False) -> None:
    """Human output: a header, then the task table, or with ``explain`` each bucket once: its task (if any) and
    the rule that decided it, the reasons wrapped below it."""
    from rich.markup import escape
    from rich.table import Table as RichTable

    from maintd.units import fmt_bytes

    console.print(f"[bold]{escape(p.table_uri)}[/bold] version {p.read_version}, policy {escape(p.policy_name)}: "
                  f"{len(p.tasks)} task(s), {fmt_bytes(p.input_bytes)} to rewrite, {len(p.decisions)} bucket(s)")
    if explain:
        _print_explained(console, p)
        return
    if p.tasks:
        t = RichTable(show_edge=False)
        for col in ("partition / bucket", "kind", "level", "files", "bytes", "output", "score", "reason"):
            t.add_column(col, overflow="fold")
        for task in p.tasks:
            t.add_row(escape(_where(task.partition, task.bucket)), task.kind,
                      "-" if task.target_level is None else str(task.target_level), str(task.input_files),
                      fmt_bytes(task.input_bytes), fmt_bytes(task.expected_output_bytes), f"{task.score:.3f}",
                      escape(task.reason))
        print_table(console, t)


def _print_explained(console: Console, p: MaintenancePlan) -> None:
    """One block per bucket: ``where: action [rule]`` (with its task's kind, files and bytes), then the
    decision's reasons, one clause a line, wrapped to :data:`EXPLAIN_WIDTH` columns."""
    from rich.markup import escape

    from maintd.units import fmt_bytes

    width = min(EXPLAIN_WIDTH, console.width) if console.is_terminal else EXPLAIN_WIDTH
    tasks = {(tuple(sorted(t.partition.items(), key=str)), t.bucket): t for t in p.tasks}
    for d in p.decisions:
        task = tasks.get((tuple(sorted(d.partition.items(), key=str)), d.bucket))
        what = ""
        if task is not None:
            level = "" if task.target_level is None else f" to level {task.target_level}"
            kind = "" if task.kind == d.action else f" {task.kind}"
            what = f"{kind}{level}, {task.input_files} file(s), {fmt_bytes(task.input_bytes)}"
        console.print(f"  {escape(_where(d.partition, d.bucket))}: [cyan]{d.action}[/cyan]{escape(what)} "
                      f"\\[{escape(d.rule)}]", highlight=False)
        for clause in (c.strip() for c in d.message.split("; ") if c.strip()):
            for line in _wrap(clause.split(", "), width):
                console.print(line, highlight=False, markup=False)


def _wrap(parts: list[str], width: int) -> list[str]:
    """Comma-separated ``parts`` on lines of at most ``width`` columns (a part longer than a line gets its own),
    indented; a part is never split, so a figure stays beside its unit."""
    lines: list[str] = []
    current = ""
    for part in parts:
        candidate = f"{current}, {part}" if current else part
        indent = 6 if not lines else 8
        if current and indent + len(candidate) > width:
            lines.append(current + ",")
            current = part
        else:
            current = candidate
    lines.append(current)
    return [("      " if i == 0 else "        ") + line for i, line in enumerate(lines)]
