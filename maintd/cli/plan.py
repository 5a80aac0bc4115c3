"""``maintd plan``: print the maintenance plan of tables, and with ``--explain`` why each bucket is (not) worked on.

Planning reads the table log only; nothing is written. One table's failure (missing table, bad policy
override) is reported and the other tables are still planned; the exit code is 1 if any failed.
"""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from maintd.cli._output import print_table
from maintd.errors import MaintdError

if TYPE_CHECKING:
    from rich.console import Console

if TYPE_CHECKING:
    from maintd.planner import MaintenancePlan, PolicyFile


def register(app: typer.Typer) -> None:
    """Add ``maintd plan`` to the root app."""
    app.command("plan")(plan_command)


def plan_command(
    uris: list[str] = typer.Argument(..., help="Table URIs to plan."),
    policy: Path | None = typer.Option(None, "--policy", help="Policy YAML file (default: the packaged defaults)."),
    explain: bool = typer.Option(False, "--explain", help="Show every bucket, with the rule that decided it."),
    json_out: bool = typer.Option(False, "--json", help="Print each plan as one JSON line (a MaintenancePlan)."),
    show_policy: bool = typer.Option(False, "--show-policy", help="Print each table's effective policy as YAML."),
) -> None:
    """Plan clustering and compaction of tables and print the plan; writes nothing."""
    from rich.console import Console
    from rich.markup import escape

    from maintd.planner import load_policy_file

    out, err = Console(soft_wrap=True), Console(stderr=True, soft_wrap=True)
    try:
        policy_file = load_policy_file(policy)
    except MaintdError as exc:
        err.print(f"[red]error:[/red] {escape(str(exc))}")
        raise typer.Exit(2) from None
    now = datetime.now(UTC)
    failed = [uri for uri in uris if not _plan_one(uri, policy_file, now, out, err, explain=explain,
                                                   json_out=json_out, show_policy=show_policy)]
    if failed:
        err.print(f"[red]planning failed for {len(failed)} table(s):[/red] {escape(', '.join(failed))}")
        raise typer.Exit(1)


def plan_table(uri: str, policy_file: PolicyFile, now: datetime) -> tuple[MaintenancePlan, str]:
    """Open a table and plan it with its effective policy; returns the plan and the policy as YAML."""
    from maintd.planner import plan, policy_yaml
    from maintd.table import Table

    table = Table.open(uri)
    snap = table.snapshot()
    md = snap.metadata
    resolved = policy_file.resolve(name=md.name or "", uri=table.uri, properties=md.properties)
    return plan(snap, resolved.policy, now, table.uri, policy_name=resolved.name), policy_yaml(resolved.policy)


def _plan_one(uri: str, policy_file: PolicyFile, now: datetime, out: Console, err: Console, *, explain: bool,
              json_out: bool, show_policy: bool) -> bool:
    from rich.markup import escape
    try:
        p, pol_yaml = plan_table(uri, policy_file, now)
    except MaintdError as exc:
        if json_out:
            sys.stdout.write(json.dumps({"table_uri": uri, "error": str(exc)}) + "\n")
        err.print(f"[red]error:[/red] {escape(str(exc))}")
        return False
    if json_out:
        sys.stdout.write(p.model_dump_json() + "\n")
        return True
    print_plan(out, p, explain=explain)
    if show_policy:
        out.print(f"[bold]effective policy[/bold] ({escape(p.policy_name)}):")
        out.print(escape(pol_yaml), highlight=False)
    return True


def _where(partition: dict[str, str | None], bucket: int) -> str:
    part = ",".join(f"{k}={v}" for k, v in partition.items())
    return f"{part} bucket {bucket}" if part else f"bucket {bucket}"


def print_plan(console: Console, p: MaintenancePlan, *, explain: bool = False) -> None:
    """Human output: a header, the task table, and with ``explain`` one line per bucket."""
    from rich.markup import escape
    from rich.table import Table as RichTable

    from maintd.units import fmt_bytes

    console.print(f"[bold]{escape(p.table_uri)}[/bold] version {p.read_version}, policy {escape(p.policy_name)}: "
                  f"{len(p.tasks)} task(s), {fmt_bytes(p.input_bytes)} to rewrite, {len(p.decisions)} bucket(s)")
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
    if explain:
        for d in p.decisions:
            console.print(f"  {escape(_where(d.partition, d.bucket))}: [cyan]{d.action}[/cyan] "
                          f"\\[{escape(d.rule)}] {escape(d.message)}", highlight=False)
